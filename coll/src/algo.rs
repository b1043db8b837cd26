//! Every algorithm, each as a function returning the [`Schedule`] of one rank. The
//! functions at the crate root choose among them; these are public so that an executor
//! (or a test) can force one.
//!
//! Conventions: `rank` and `root` are communicator ranks below `size`; lengths are in
//! bytes; `elem` is the element size of a reduction or split (every length given with an
//! `elem` must be a multiple of it). "Relative rank" is `(rank - root) mod size`.
//! Functions panic on arguments that break these rules.

use crate::tuning::pof2_floor;
use crate::{BufId, Builder, Schedule};

/// `bufs[0]`, the input.
const IN: BufId = BufId(0);

fn ranks(rank: u32, size: u32) -> (usize, usize) {
    assert!(size >= 1, "communicator size must be at least 1");
    assert!(rank < size, "rank {rank} out of range for size {size}");
    (rank as usize, size as usize)
}

fn root_of(root: u32, size: usize) -> usize {
    assert!(
        (root as usize) < size,
        "root {root} out of range for size {size}"
    );
    root as usize
}

fn check_elem(len: usize, elem: usize) {
    assert!(elem > 0, "element size must be positive");
    assert!(
        len % elem == 0,
        "length {len} is not a multiple of the element size {elem}"
    );
}

/// Byte offsets of `parts` pieces of a `len`-byte vector of `elem`-byte elements, split
/// as evenly as possible on element boundaries (the first pieces get the extra
/// elements): piece `i` is `offs[i]..offs[i + 1]`.
pub(crate) fn split(len: usize, elem: usize, parts: usize) -> Vec<usize> {
    let count = len / elem;
    let (base, extra) = (count / parts, count % parts);
    let mut offs = Vec::with_capacity(parts + 1);
    let mut at = 0;
    offs.push(0);
    for i in 0..parts {
        at += (base + usize::from(i < extra)) * elem;
        offs.push(at);
    }
    offs
}

/// Prefix sums: `displs[i]` = sum of `counts[..i]`, with the total last.
fn displs(counts: &[usize]) -> Vec<usize> {
    let mut d = Vec::with_capacity(counts.len() + 1);
    let mut at = 0;
    d.push(0);
    for &c in counts {
        at += c;
        d.push(at);
    }
    d
}

/// Two scratch buffers of `len` bytes, allocated on first use, for algorithms that
/// receive into the buffer that does not hold the accumulator (never `bufs[0]`).
struct Scratch {
    len: usize,
    a: Option<BufId>,
    b: Option<BufId>,
}

impl Scratch {
    fn new(len: usize) -> Self {
        Scratch {
            len,
            a: None,
            b: None,
        }
    }

    /// A scratch buffer other than `cur`.
    fn spare(&mut self, bld: &mut Builder, cur: BufId) -> BufId {
        let len = self.len;
        if self.a == Some(cur) {
            *self.b.get_or_insert_with(|| bld.alloc(len))
        } else {
            *self.a.get_or_insert_with(|| bld.alloc(len))
        }
    }
}

/// After receiving `inc` (the contribution of LOWER ranks than `cur`'s) into a scratch
/// buffer: combine so that the result is `inc op cur`; returns where it is. Never
/// writes `bufs[0]`.
fn combine_lower(
    bld: &mut Builder,
    sc: &mut Scratch,
    cur: BufId,
    inc: BufId,
    off: usize,
    len: usize,
    commutative: bool,
) -> BufId {
    if commutative {
        bld.reduce(cur, off, inc, off, len);
        inc
    } else if cur != IN {
        bld.reduce(inc, off, cur, off, len);
        cur
    } else {
        let other = sc.spare(bld, inc);
        bld.copy(IN, off, other, off, len);
        bld.reduce(inc, off, other, off, len);
        other
    }
}

/// After receiving `inc` (the contribution of HIGHER ranks than `cur`'s) into a scratch
/// buffer: `inc = cur op inc`; returns `inc`.
fn combine_higher(bld: &mut Builder, cur: BufId, inc: BufId, off: usize, len: usize) -> BufId {
    bld.reduce(cur, off, inc, off, len);
    inc
}

/// Lowest set bit of a relative rank; for the root (0), the first power of two ≥ size.
fn low_bit(vr: usize, n: usize) -> usize {
    if vr == 0 {
        n.next_power_of_two()
    } else {
        vr & vr.wrapping_neg()
    }
}

// ---------------------------------------------------------------------------------------
// Barrier

/// Dissemination barrier: ⌈log₂ size⌉ rounds; in round k a rank sends a 0-byte message to
/// `rank + 2^k` and receives one from `rank - 2^k`. `bufs[0]` is empty; no result.
pub fn barrier_dissemination(rank: u32, size: u32) -> Schedule {
    let (r, n) = ranks(rank, size);
    let mut b = Builder::new(0);
    let mut k = 1;
    while k < n {
        b.send0((r + k) % n, IN, 0, 0);
        b.recv0((r + n - k) % n, IN, 0, 0);
        b.fence();
        k *= 2;
    }
    b.finish((IN, 0, 0))
}

// ---------------------------------------------------------------------------------------
// Broadcast

fn bcast_binomial_in(b: &mut Builder, r: usize, n: usize, root: usize, buf: BufId, len: usize) {
    let vr = (r + n - root) % n;
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            b.recv((r + n - mask) % n, buf, 0, len);
            break;
        }
        mask <<= 1;
    }
    b.fence();
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            b.send((r + mask) % n, buf, 0, len);
        }
        mask >>= 1;
    }
    b.fence();
}

/// Binomial-tree broadcast: a rank receives from its parent (relative rank minus its
/// lowest set bit), then sends to its children, farthest first. `bufs[0]`: `len` bytes,
/// the data at the root (ignored elsewhere); result: `bufs[0]` on every rank.
pub fn bcast_binomial(rank: u32, size: u32, root: u32, len: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    let root = root_of(root, n);
    let mut b = Builder::new(len);
    bcast_binomial_in(&mut b, r, n, root, IN, len);
    b.finish((IN, 0, len))
}

/// Van de Geijn broadcast for large messages: the data is cut into `size` pieces on
/// element boundaries, scattered down a binomial tree (relative rank i gets piece i),
/// then gathered everywhere by a ring allgather (`size - 1` steps). `bufs[0]` and
/// result as [`bcast_binomial`].
pub fn bcast_scatter_ring(rank: u32, size: u32, root: u32, len: usize, elem: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    let root = root_of(root, n);
    check_elem(len, elem);
    let mut b = Builder::new(len);
    let offs = split(len, elem, n);
    // bytes of relative pieces [lo, hi)
    let piece = |lo: usize, hi: usize| (offs[lo.min(n)], offs[hi.min(n)] - offs[lo.min(n)]);
    let vr = (r + n - root) % n;

    // binomial scatter: the subtree of relative rank v at level `mask` is v..v+mask
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            let (off, l) = piece(vr, vr + mask);
            b.recv((r + n - mask) % n, IN, off, l);
            break;
        }
        mask <<= 1;
    }
    b.fence();
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            let (off, l) = piece(vr + mask, vr + 2 * mask);
            b.send((r + mask) % n, IN, off, l);
        }
        mask >>= 1;
    }
    b.fence();

    // ring allgather of the pieces (in relative numbering)
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    for i in 0..n.saturating_sub(1) {
        let (so, sl) = piece((vr + n - i) % n, (vr + n - i) % n + 1);
        let (ro, rl) = piece((vr + 2 * n - i - 1) % n, (vr + 2 * n - i - 1) % n + 1);
        b.send(right, IN, so, sl);
        b.recv(left, IN, ro, rl);
        b.fence();
    }
    b.finish((IN, 0, len))
}

// ---------------------------------------------------------------------------------------
// Reduce

/// Binomial reduction towards `root` of `input[0..len]`; returns the buffer holding the
/// result at the root (meaningless elsewhere). The accumulator of relative rank v always
/// covers relative ranks v..v+2^k, so with `root == 0` the combination is in rank order.
fn reduce_binomial_in(
    b: &mut Builder,
    r: usize,
    n: usize,
    root: usize,
    input: BufId,
    len: usize,
) -> BufId {
    let vr = (r + n - root) % n;
    let mut sc = Scratch::new(len);
    let mut cur = input;
    let mut mask = 1;
    while mask < n {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < n {
                let inc = sc.spare(b, cur);
                b.recv((child + root) % n, inc, 0, len);
                b.fence();
                cur = combine_higher(b, cur, inc, 0, len);
            }
        } else {
            b.send((vr - mask + root) % n, cur, 0, len);
            break;
        }
        mask <<= 1;
    }
    b.fence();
    cur
}

/// Binomial-tree reduction. Commutative: the tree is rooted at `root` (relative ranks).
/// Non-commutative: the tree is rooted at rank 0, so the result is combined in rank
/// order, and rank 0 then sends it to `root` (as MPICH does). `bufs[0]`: this rank's
/// `len`-byte contribution; result: the reduction at the root, nothing elsewhere.
pub fn reduce_binomial(
    rank: u32,
    size: u32,
    root: u32,
    len: usize,
    elem: usize,
    commutative: bool,
) -> Schedule {
    let (r, n) = ranks(rank, size);
    let root = root_of(root, n);
    check_elem(len, elem);
    let mut b = Builder::new(len);
    if commutative || root == 0 {
        let cur = reduce_binomial_in(&mut b, r, n, root, IN, len);
        let res = if r == root { len } else { 0 };
        b.finish((cur, 0, res))
    } else {
        let cur = reduce_binomial_in(&mut b, r, n, 0, IN, len);
        if r == 0 {
            b.send(root, cur, 0, len);
            b.fence();
            b.finish((cur, 0, 0))
        } else if r == root {
            let out = b.alloc(len);
            b.recv(0, out, 0, len);
            b.fence();
            b.finish((out, 0, len))
        } else {
            b.finish((IN, 0, 0))
        }
    }
}

/// State shared by the Rabenseifner algorithms: the fold of a non-power-of-two size
/// into the largest power of two, and the recursive-halving reduce-scatter.
struct Rabenseifner {
    pof2: usize,
    rem: usize,
    levels: usize,
    /// Byte offsets of the `pof2` blocks.
    offs: Vec<usize>,
}

impl Rabenseifner {
    fn new(n: usize, len: usize, elem: usize) -> Self {
        let pof2 = pof2_floor(n);
        Rabenseifner {
            pof2,
            rem: n - pof2,
            levels: pof2.trailing_zeros() as usize,
            offs: split(len, elem, pof2),
        }
    }

    /// The rank in the power-of-two group, or `None` for the even ranks below `2*rem`
    /// that hand their data to their odd neighbour.
    fn newrank(&self, r: usize) -> Option<usize> {
        if r < 2 * self.rem {
            (r % 2 == 1).then_some(r / 2)
        } else {
            Some(r - self.rem)
        }
    }

    fn real(&self, nr: usize) -> usize {
        if nr < self.rem {
            2 * nr + 1
        } else {
            nr + self.rem
        }
    }

    /// Blocks held by group rank `nr` after `k` halving steps (step j keeps the lower
    /// half when bit j of `nr` is 0).
    fn region(&self, nr: usize, k: usize) -> (usize, usize) {
        let (mut lo, mut hi) = (0, self.pof2);
        for j in 0..k {
            let half = (hi - lo) / 2;
            if nr >> j & 1 == 0 {
                hi = lo + half;
            } else {
                lo += half;
            }
        }
        (lo, hi)
    }

    /// (offset, length) in bytes of the region of `nr` after `k` steps.
    fn bytes(&self, nr: usize, k: usize) -> (usize, usize) {
        let (lo, hi) = self.region(nr, k);
        (self.offs[lo], self.offs[hi] - self.offs[lo])
    }

    /// Fold, then reduce-scatter by recursive halving. Returns the group rank (if any)
    /// and the buffer holding this rank's block `region(nr, levels)` (commutative op).
    fn reduce_scatter(
        &self,
        b: &mut Builder,
        sc: &mut Scratch,
        r: usize,
        len: usize,
    ) -> (Option<usize>, BufId) {
        let mut cur = IN;
        if r < 2 * self.rem {
            if r % 2 == 0 {
                b.send(r + 1, IN, 0, len);
                b.fence();
            } else {
                let inc = sc.spare(b, cur);
                b.recv(r - 1, inc, 0, len);
                b.fence();
                cur = combine_higher(b, cur, inc, 0, len); // commutative
            }
        }
        let Some(nr) = self.newrank(r) else {
            return (None, cur);
        };
        for k in 0..self.levels {
            let partner = nr ^ (1 << k);
            let dst = self.real(partner);
            let (so, sl) = self.bytes(partner, k + 1);
            let (ro, rl) = self.bytes(nr, k + 1);
            let inc = sc.spare(b, cur);
            b.send(dst, cur, so, sl);
            b.recv(dst, inc, ro, rl);
            b.fence();
            cur = combine_higher(b, cur, inc, ro, rl);
        }
        (Some(nr), cur)
    }
}

/// Rabenseifner's reduction for large commutative operations: reduce-scatter by
/// recursive halving (after folding the ranks beyond the largest power of two into
/// their neighbours), then a binomial gather of the blocks to the root. `bufs[0]` and
/// result as [`reduce_binomial`]. Commutative operations only.
pub fn reduce_rabenseifner(rank: u32, size: u32, root: u32, len: usize, elem: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    let root = root_of(root, n);
    check_elem(len, elem);
    let mut b = Builder::new(len);
    let rs = Rabenseifner::new(n, len, elem);
    let mut sc = Scratch::new(len);
    let (nr, cur) = rs.reduce_scatter(&mut b, &mut sc, r, len);
    // an even root below 2*rem has no group rank: its odd neighbour gathers for it
    let gatherer = if root < 2 * rs.rem && root % 2 == 0 {
        root + 1
    } else {
        root
    };
    let newroot = rs.newrank(gatherer).expect("gatherer is in the group");
    if let Some(nr) = nr {
        for k in (0..rs.levels).rev() {
            let partner = nr ^ (1 << k);
            if (nr >> k & 1) == (newroot >> k & 1) {
                let (ro, rl) = rs.bytes(partner, k + 1);
                b.recv(rs.real(partner), cur, ro, rl);
            } else {
                let (so, sl) = rs.bytes(nr, k + 1);
                b.fence();
                b.send(rs.real(partner), cur, so, sl);
                break;
            }
        }
        b.fence();
    }
    if gatherer != root {
        if r == gatherer {
            b.send(root, cur, 0, len);
        } else if r == root {
            let out = sc.spare(&mut b, IN);
            b.recv(gatherer, out, 0, len);
            b.fence();
            return b.finish((out, 0, len));
        }
    }
    let res = if r == root { len } else { 0 };
    b.finish((cur, 0, res))
}

// ---------------------------------------------------------------------------------------
// Allreduce

/// Recursive-doubling allreduce. With a non-power-of-two size, the first `2*rem` ranks
/// pair up (even hands its data to odd, which combines them) so that a power of two of
/// ranks remains, and the even ones get the result back at the end. In each step the
/// contribution of the lower ranks is the left operand, so the result is in rank order
/// for non-commutative operations. `bufs[0]`: this rank's contribution; result: the
/// reduction, on every rank.
pub fn allreduce_recursive_doubling(
    rank: u32,
    size: u32,
    len: usize,
    elem: usize,
    commutative: bool,
) -> Schedule {
    let (r, n) = ranks(rank, size);
    check_elem(len, elem);
    let mut b = Builder::new(len);
    let pof2 = pof2_floor(n);
    let rem = n - pof2;
    let mut sc = Scratch::new(len);
    let mut cur = IN;
    let newrank = if r < 2 * rem {
        if r % 2 == 0 {
            b.send(r + 1, cur, 0, len);
            b.fence();
            None
        } else {
            let inc = sc.spare(&mut b, cur);
            b.recv(r - 1, inc, 0, len);
            b.fence();
            cur = combine_lower(&mut b, &mut sc, cur, inc, 0, len, commutative);
            Some(r / 2)
        }
    } else {
        Some(r - rem)
    };
    if let Some(nr) = newrank {
        let mut mask = 1;
        while mask < pof2 {
            let nd = nr ^ mask;
            let dst = if nd < rem { 2 * nd + 1 } else { nd + rem };
            let inc = sc.spare(&mut b, cur);
            b.send(dst, cur, 0, len);
            b.recv(dst, inc, 0, len);
            b.fence();
            cur = if dst < r {
                combine_lower(&mut b, &mut sc, cur, inc, 0, len, commutative)
            } else {
                combine_higher(&mut b, cur, inc, 0, len)
            };
            mask <<= 1;
        }
    }
    cur = unfold(&mut b, &mut sc, r, rem, cur, len);
    b.finish((cur, 0, len))
}

/// The unfold of an allreduce on a non-power-of-two size: each of the first `2 * rem`
/// odd ranks sends the result to the even rank it was folded into; returns the buffer
/// holding this rank's result.
fn unfold(
    b: &mut Builder,
    sc: &mut Scratch,
    r: usize,
    rem: usize,
    cur: BufId,
    len: usize,
) -> BufId {
    if r >= 2 * rem {
        return cur;
    }
    if r % 2 == 1 {
        b.send(r - 1, cur, 0, len);
        cur
    } else {
        let out = sc.spare(b, IN);
        b.recv(r + 1, out, 0, len);
        out
    }
}

/// Rabenseifner's allreduce for large commutative operations: the fold of
/// [`allreduce_recursive_doubling`], a reduce-scatter by recursive halving over `pof2`
/// blocks, an allgather by recursive doubling, and the unfold. `bufs[0]` and result as
/// [`allreduce_recursive_doubling`]. Commutative operations only.
pub fn allreduce_rabenseifner(rank: u32, size: u32, len: usize, elem: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    check_elem(len, elem);
    let mut b = Builder::new(len);
    let rs = Rabenseifner::new(n, len, elem);
    let mut sc = Scratch::new(len);
    let (nr, mut cur) = rs.reduce_scatter(&mut b, &mut sc, r, len);
    if let Some(nr) = nr {
        for k in (0..rs.levels).rev() {
            let partner = nr ^ (1 << k);
            let dst = rs.real(partner);
            let (so, sl) = rs.bytes(nr, k + 1);
            let (ro, rl) = rs.bytes(partner, k + 1);
            b.send(dst, cur, so, sl);
            b.recv(dst, cur, ro, rl);
            b.fence();
        }
    }
    cur = unfold(&mut b, &mut sc, r, rs.rem, cur, len);
    b.finish((cur, 0, len))
}

// ---------------------------------------------------------------------------------------
// Gather / scatter

/// Binomial gather: each rank collects its subtree's blocks (in relative order) and
/// sends them to its parent in one message; the root rotates them into rank order.
/// `bufs[0]`: this rank's `len`-byte block; result at the root: the `size * len` bytes
/// of all blocks in rank order; nothing elsewhere.
pub fn gather_binomial(rank: u32, size: u32, root: u32, len: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    let root = root_of(root, n);
    let mut b = Builder::new(len);
    if n == 1 {
        return b.finish((IN, 0, len));
    }
    let vr = (r + n - root) % n;
    let low = low_bit(vr, n);
    let cnt = low.min(n - vr); // blocks in my subtree
    let parent = if vr == 0 { root } else { (vr - low + root) % n };
    if cnt == 1 {
        b.send(parent, IN, 0, len);
        return b.finish((IN, 0, 0));
    }
    let t = b.alloc(cnt * len);
    b.copy(IN, 0, t, 0, len);
    let mut mask = 1;
    while mask < low && vr + mask < n {
        let ccnt = mask.min(n - vr - mask);
        b.recv((vr + mask + root) % n, t, mask * len, ccnt * len);
        mask <<= 1;
    }
    b.fence();
    if vr != 0 {
        b.send(parent, t, 0, cnt * len);
        return b.finish((IN, 0, 0));
    }
    if root == 0 {
        return b.finish((t, 0, n * len));
    }
    let out = b.alloc(n * len);
    b.copy(t, 0, out, root * len, (n - root) * len);
    b.copy(t, (n - root) * len, out, 0, root * len);
    b.finish((out, 0, n * len))
}

/// Linear gatherv: the root receives every block directly. `counts[i]`: bytes from rank
/// i. `bufs[0]`: this rank's `counts[rank]` bytes; result at the root: the blocks
/// concatenated in rank order (`sum(counts)` bytes); nothing elsewhere.
pub fn gatherv_linear(rank: u32, size: u32, root: u32, counts: &[usize]) -> Schedule {
    let (r, n) = ranks(rank, size);
    let root = root_of(root, n);
    assert_eq!(counts.len(), n, "one count per rank");
    let mut b = Builder::new(counts[r]);
    if r != root {
        b.send(root, IN, 0, counts[r]);
        return b.finish((IN, 0, 0));
    }
    let d = displs(counts);
    let out = b.alloc(d[n]);
    for i in (0..n).filter(|&i| i != root) {
        b.recv(i, out, d[i], counts[i]);
    }
    b.copy(IN, 0, out, d[root], counts[root]);
    b.finish((out, 0, d[n]))
}

/// Binomial scatter, the mirror of [`gather_binomial`]. `bufs[0]`: at the root the
/// `size * len` bytes of all blocks in rank order (block i for rank i), empty elsewhere;
/// result: this rank's `len`-byte block.
pub fn scatter_binomial(rank: u32, size: u32, root: u32, len: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    let root = root_of(root, n);
    let vr = (r + n - root) % n;
    let mut b = Builder::new(if vr == 0 { n * len } else { 0 });
    let low = low_bit(vr, n);
    let cnt = low.min(n - vr);
    // `src`: the blocks of my subtree in relative order; `own`: where my block is
    let (src, own) = if vr == 0 {
        if root == 0 {
            (IN, (IN, 0))
        } else {
            let t = b.alloc(n * len);
            b.copy(IN, root * len, t, 0, (n - root) * len);
            b.copy(IN, 0, t, (n - root) * len, root * len);
            (t, (IN, root * len))
        }
    } else {
        let t = b.alloc(cnt * len);
        b.recv((vr - low + root) % n, t, 0, cnt * len);
        b.fence();
        (t, (t, 0))
    };
    let mut mask = low >> 1;
    while mask > 0 {
        if vr + mask < n {
            let ccnt = mask.min(n - vr - mask);
            b.send((vr + mask + root) % n, src, mask * len, ccnt * len);
        }
        mask >>= 1;
    }
    b.finish((own.0, own.1, len))
}

/// Linear scatterv: the root sends every block directly. `counts[i]`: bytes for rank i.
/// `bufs[0]`: at the root the blocks concatenated in rank order (`sum(counts)` bytes),
/// empty elsewhere; result: this rank's `counts[rank]` bytes.
pub fn scatterv_linear(rank: u32, size: u32, root: u32, counts: &[usize]) -> Schedule {
    let (r, n) = ranks(rank, size);
    let root = root_of(root, n);
    assert_eq!(counts.len(), n, "one count per rank");
    let d = displs(counts);
    let mut b = Builder::new(if r == root { d[n] } else { 0 });
    let res = scatterv_linear_in(&mut b, r, n, root, IN, counts);
    b.finish(res)
}

fn scatterv_linear_in(
    b: &mut Builder,
    r: usize,
    n: usize,
    root: usize,
    src: BufId,
    counts: &[usize],
) -> (BufId, usize, usize) {
    let d = displs(counts);
    if r == root {
        for i in (0..n).filter(|&i| i != root) {
            b.send(i, src, d[i], counts[i]);
        }
        b.fence();
        (src, d[root], counts[root])
    } else {
        let out = b.alloc(counts[r]);
        b.recv(root, out, 0, counts[r]);
        b.fence();
        (out, 0, counts[r])
    }
}

// ---------------------------------------------------------------------------------------
// Allgather

/// Recursive-doubling allgather; `size` must be a power of two. In step k a rank
/// exchanges the 2^k blocks it has with `rank ^ 2^k`. `bufs[0]`: this rank's `len`-byte
/// block; result: all `size * len` bytes in rank order, on every rank.
///
/// The first step's send, this rank's own block, leaves from the input rather than
/// from the result after the input's copy there (as in Bruck's and the ring), and the
/// copy comes after the step's send and receive are posted: the peer then reads bytes
/// the caller left alone, not lines this rank has just written (which a read from the
/// other core must fetch out of this core's cache), and the copy runs while the message
/// travels. On two ranks, 16 KiB–1 MiB blocks took 0.53–0.79x the time
/// (`docs/performance.md`, "Collectives of 4 KiB–1 MiB on two ranks").
pub fn allgather_recursive_doubling(rank: u32, size: u32, len: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    assert!(
        n.is_power_of_two(),
        "recursive doubling needs a power-of-two size"
    );
    let mut b = Builder::new(len);
    if n == 1 {
        return b.finish((IN, 0, len));
    }
    let out = b.alloc(n * len);
    let mut mask = 1;
    while mask < n {
        let partner = r ^ mask;
        let mine = r & !(mask - 1);
        let theirs = partner & !(mask - 1);
        if mask == 1 {
            // this rank's block, from the input (see the doc comment)
            b.send(partner, IN, 0, len);
        } else {
            b.send(partner, out, mine * len, mask * len);
        }
        b.recv(partner, out, theirs * len, mask * len);
        if mask == 1 {
            b.copy(IN, 0, out, r * len, len);
        }
        b.fence();
        mask <<= 1;
    }
    b.finish((out, 0, n * len))
}

/// Bruck's allgather (any size, ⌈log₂ size⌉ steps): in step k a rank sends the first
/// min(2^k, size-2^k) blocks it has to `rank - 2^k` and receives as many from
/// `rank + 2^k` behind them; a final rotation puts the blocks in rank order. `bufs[0]`
/// and result as [`allgather_recursive_doubling`].
pub fn allgather_bruck(rank: u32, size: u32, len: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    let mut b = Builder::new(len);
    if n == 1 {
        return b.finish((IN, 0, len));
    }
    // t[i] = block of rank (r + i) % n
    let t = b.alloc(n * len);
    let mut k = 1;
    while k < n {
        let cnt = k.min(n - k);
        if k == 1 {
            // this rank's block, from the input ([`allgather_recursive_doubling`])
            b.send((r + n - k) % n, IN, 0, len);
        } else {
            b.send((r + n - k) % n, t, 0, cnt * len);
        }
        b.recv((r + k) % n, t, k * len, cnt * len);
        if k == 1 {
            b.copy(IN, 0, t, 0, len);
        }
        b.fence();
        k *= 2;
    }
    if r == 0 {
        return b.finish((t, 0, n * len));
    }
    let out = b.alloc(n * len);
    b.copy(t, 0, out, r * len, (n - r) * len);
    b.copy(t, (n - r) * len, out, 0, r * len);
    b.finish((out, 0, n * len))
}

/// Ring allgather: `size - 1` steps, each passing one block to the right. `bufs[0]` and
/// result as [`allgather_recursive_doubling`].
pub fn allgather_ring(rank: u32, size: u32, len: usize) -> Schedule {
    let (_, n) = ranks(rank, size);
    allgatherv_ring(rank, size, &vec![len; n])
}

/// Ring allgatherv: in step i a rank sends block `rank - i` to `rank + 1` and receives
/// block `rank - i - 1` from `rank - 1`. `counts[i]`: bytes of rank i's block.
/// `bufs[0]`: this rank's `counts[rank]` bytes; result: all blocks concatenated in rank
/// order, on every rank.
pub fn allgatherv_ring(rank: u32, size: u32, counts: &[usize]) -> Schedule {
    let (r, n) = ranks(rank, size);
    assert_eq!(counts.len(), n, "one count per rank");
    let d = displs(counts);
    let mut b = Builder::new(counts[r]);
    if n == 1 {
        return b.finish((IN, 0, counts[0]));
    }
    let out = b.alloc(d[n]);
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    for i in 0..n - 1 {
        let s = (r + n - i) % n;
        let q = (r + 2 * n - i - 1) % n;
        if i == 0 {
            // this rank's block, from the input ([`allgather_recursive_doubling`])
            b.send(right, IN, 0, counts[r]);
        } else {
            b.send(right, out, d[s], counts[s]);
        }
        b.recv(left, out, d[q], counts[q]);
        if i == 0 {
            b.copy(IN, 0, out, d[r], counts[r]);
        }
        b.fence();
    }
    b.finish((out, 0, d[n]))
}

// ---------------------------------------------------------------------------------------
// Alltoall

/// Pairwise-exchange alltoall: `size - 1` steps; in step i a rank exchanges with
/// `rank ^ i` (power-of-two sizes) or sends to `rank + i` and receives from `rank - i`.
/// `bufs[0]`: `size` blocks of `len` bytes, block j for rank j; result: `size` blocks,
/// block i from rank i.
pub fn alltoall_pairwise(rank: u32, size: u32, len: usize) -> Schedule {
    let (_, n) = ranks(rank, size);
    alltoallv_pairwise(rank, size, &vec![len; n], &vec![len; n])
}

/// Pairwise-exchange alltoallv (as [`alltoall_pairwise`]). `send_counts[j]`: bytes for
/// rank j, `recv_counts[i]`: bytes from rank i (must equal rank i's `send_counts[rank]`).
/// `bufs[0]`: the send blocks concatenated in destination order; result: the received
/// blocks concatenated in source order.
pub fn alltoallv_pairwise(
    rank: u32,
    size: u32,
    send_counts: &[usize],
    recv_counts: &[usize],
) -> Schedule {
    let (r, n) = ranks(rank, size);
    assert_eq!(send_counts.len(), n, "one send count per rank");
    assert_eq!(recv_counts.len(), n, "one receive count per rank");
    assert_eq!(send_counts[r], recv_counts[r], "counts to self differ");
    let (sd, rd) = (displs(send_counts), displs(recv_counts));
    let mut b = Builder::new(sd[n]);
    let out = b.alloc(rd[n]);
    b.copy(IN, sd[r], out, rd[r], send_counts[r]);
    for i in 1..n {
        let (src, dst) = if n.is_power_of_two() {
            (r ^ i, r ^ i)
        } else {
            ((r + n - i) % n, (r + i) % n)
        };
        b.send(dst, IN, sd[dst], send_counts[dst]);
        b.recv(src, out, rd[src], recv_counts[src]);
        b.fence();
    }
    b.finish((out, 0, rd[n]))
}

/// Bruck's alltoall for small blocks (⌈log₂ size⌉ steps): rotate the blocks up by
/// `rank`; in step k send every block whose index has bit k set to `rank + 2^k` (packed
/// in one message) and receive the same indices from `rank - 2^k`; finally block i goes
/// to position `rank - i`. `bufs[0]` and result as [`alltoall_pairwise`].
pub fn alltoall_bruck(rank: u32, size: u32, len: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    let mut b = Builder::new(n * len);
    if n == 1 {
        return b.finish((IN, 0, len));
    }
    // t[i] = block from this rank to rank (r + i) % n
    let t = b.alloc(n * len);
    b.copy(IN, r * len, t, 0, (n - r) * len);
    b.copy(IN, 0, t, (n - r) * len, r * len);
    let half = n.div_ceil(2) * len;
    let (pack, unpack) = (b.alloc(half), b.alloc(half));
    let mut k = 1;
    while k < n {
        let runs: Vec<(usize, usize)> =
            (k..n).step_by(2 * k).map(|s| (s, (s + k).min(n))).collect();
        let total: usize = runs.iter().map(|&(s, e)| e - s).sum();
        if runs.len() == 1 {
            b.send((r + k) % n, t, runs[0].0 * len, total * len);
        } else {
            let mut at = 0;
            for &(s, e) in &runs {
                b.copy(t, s * len, pack, at, (e - s) * len);
                at += (e - s) * len;
            }
            b.send((r + k) % n, pack, 0, total * len);
        }
        b.recv((r + n - k) % n, unpack, 0, total * len);
        b.fence();
        let mut at = 0;
        for &(s, e) in &runs {
            b.copy(unpack, at, t, s * len, (e - s) * len);
            at += (e - s) * len;
        }
        k *= 2;
    }
    let out = b.alloc(n * len);
    for i in 0..n {
        b.copy(t, i * len, out, ((r + n - i) % n) * len, len);
    }
    b.finish((out, 0, n * len))
}

// ---------------------------------------------------------------------------------------
// Reduce-scatter

/// Recursive-halving reduce-scatter for commutative operations on a power-of-two size:
/// in step k (k = log₂ size - 1 down to 0) a rank keeps the half of its block range on
/// its side of bit k, sends the other half to `rank ^ 2^k` and reduces the half it
/// receives. `counts[i]`: bytes of rank i's block (multiples of `elem`). `bufs[0]`:
/// this rank's contribution, `sum(counts)` bytes; result: the reduced block of this rank.
pub fn reduce_scatter_halving(rank: u32, size: u32, counts: &[usize], elem: usize) -> Schedule {
    let (r, n) = ranks(rank, size);
    assert!(
        n.is_power_of_two(),
        "recursive halving needs a power-of-two size"
    );
    assert_eq!(counts.len(), n, "one count per rank");
    counts.iter().for_each(|&c| check_elem(c, elem));
    let d = displs(counts);
    let mut b = Builder::new(d[n]);
    let mut sc = Scratch::new(d[n]);
    let mut cur = IN;
    let (mut lo, mut hi) = (0, n);
    let mut mask = n / 2;
    while mask > 0 {
        let partner = r ^ mask;
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if r & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let inc = sc.spare(&mut b, cur);
        b.send(partner, cur, d[give.0], d[give.1] - d[give.0]);
        b.recv(partner, inc, d[keep.0], d[keep.1] - d[keep.0]);
        b.fence();
        cur = combine_higher(&mut b, cur, inc, d[keep.0], d[keep.1] - d[keep.0]);
        (lo, hi) = keep;
        mask >>= 1;
    }
    b.finish((cur, d[r], counts[r]))
}

/// Reduce-scatter as a binomial reduction to rank 0 (in rank order) followed by a
/// linear scatterv; for non-commutative operations and non-power-of-two sizes.
/// Arguments, `bufs[0]` and result as [`reduce_scatter_halving`].
pub fn reduce_scatter_reduce_scatterv(
    rank: u32,
    size: u32,
    counts: &[usize],
    elem: usize,
) -> Schedule {
    let (r, n) = ranks(rank, size);
    assert_eq!(counts.len(), n, "one count per rank");
    counts.iter().for_each(|&c| check_elem(c, elem));
    let total = counts.iter().sum();
    let mut b = Builder::new(total);
    let acc = reduce_binomial_in(&mut b, r, n, 0, IN, total);
    let res = scatterv_linear_in(&mut b, r, n, 0, acc, counts);
    b.finish(res)
}

// ---------------------------------------------------------------------------------------
// Scan

/// Recursive-doubling inclusive scan: in step k a rank exchanges its partial reduction
/// (of a range of ranks around it) with `rank ^ 2^k`; data from a lower rank is folded
/// into both the partial and the result as the left operand, data from a higher rank
/// only into the partial as the right operand. `bufs[0]`: this rank's contribution;
/// result: `x_0 op ... op x_rank`.
pub fn scan_recursive_doubling(rank: u32, size: u32, len: usize) -> Schedule {
    scan_in(rank, size, len, false)
}

/// Recursive-doubling exclusive scan (as [`scan_recursive_doubling`]). Result:
/// `x_0 op ... op x_{rank-1}`; on rank 0 there is none (length 0: MPI leaves it
/// undefined).
pub fn exscan_recursive_doubling(rank: u32, size: u32, len: usize) -> Schedule {
    scan_in(rank, size, len, true)
}

fn scan_in(rank: u32, size: u32, len: usize, exclusive: bool) -> Schedule {
    let (r, n) = ranks(rank, size);
    let mut b = Builder::new(len);
    if n == 1 {
        let res = if exclusive { 0 } else { len };
        return b.finish((IN, 0, res));
    }
    let mut partial = b.alloc(len);
    let mut tmp = b.alloc(len);
    let result = b.alloc(len);
    b.copy(IN, 0, partial, 0, len);
    if !exclusive {
        b.copy(IN, 0, result, 0, len);
    }
    let mut have_result = !exclusive;
    let mut mask = 1;
    while mask < n {
        let dst = r ^ mask;
        let more = mask * 2 < n;
        if dst < n {
            b.send(dst, partial, 0, len);
            b.recv(dst, tmp, 0, len);
            b.fence();
            if dst < r {
                if have_result {
                    b.reduce(tmp, 0, result, 0, len);
                } else {
                    b.copy(tmp, 0, result, 0, len);
                    have_result = true;
                }
                if more {
                    b.reduce(tmp, 0, partial, 0, len);
                }
            } else if more {
                b.reduce(partial, 0, tmp, 0, len);
                std::mem::swap(&mut partial, &mut tmp);
            }
        }
        mask <<= 1;
    }
    let res = if exclusive && r == 0 { 0 } else { len };
    b.finish((result, 0, res))
}
