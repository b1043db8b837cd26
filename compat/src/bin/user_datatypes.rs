//! Derived datatypes built by hand: `UserDatatype::contiguous`, `vector`, `indexed`,
//! `heterogeneous_indexed`, `structured` (also nesting a user type), used through
//! `View`/`MutView` (unsafe in mpi 0.8) in point-to-point and collectives, and a
//! `#[repr(C)]` struct with a derived `Equivalence` next to the same type map built by hand.

use mpi::datatype::{MutView, UncommittedDatatypeRef, UserDatatype, View};
use mpi::traits::*;
use mpi::{Address, Count};

const N: usize = 6; // matrices are N x N, row-major

/// A record a C-minded user describes with MPI_Type_create_struct.
#[repr(C)]
// (the `mpi` crate also accepts a hand-written `unsafe impl Equivalence` giving the
// same type map; rsmpi takes only the derive: docs/mpi-crate.md)
#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Cell {
    tag: i32,
    value: f64,
    neighbours: [i16; 4],
}

fn cell(r: i32, k: i32) -> Cell {
    Cell {
        tag: r * 100 + k,
        value: r as f64 + k as f64 / 8.0,
        neighbours: [r as i16, k as i16, -1, 3],
    }
}

fn matrix(seed: i32) -> Vec<f64> {
    (0..N * N)
        .map(|i| seed as f64 * 1000.0 + i as f64)
        .collect()
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 2);
    let zero = world.process_at_rank(0);
    let one = world.process_at_rank(1);

    let f64_t = f64::equivalent_datatype();
    let row_t = UserDatatype::contiguous(N as Count, &f64_t);
    let col_t = UserDatatype::vector(N as Count, 1, N as Count, &f64_t);
    // upper triangle, diagonal included: row i holds N - i elements starting at i*N + i
    let lens: Vec<Count> = (0..N as Count).map(|i| N as Count - i).collect();
    let displs: Vec<Count> = (0..N as Count).map(|i| i * N as Count + i).collect();
    let upper_t = UserDatatype::indexed(&lens, &displs, &f64_t);
    // the same in bytes
    let bdispls: Vec<Address> = displs
        .iter()
        .map(|&d| (d as usize * 8) as Address)
        .collect();
    let upper_bytes_t = UserDatatype::heterogeneous_indexed(&lens, &bdispls, &f64_t);

    let m = matrix(rank);
    if rank == 0 {
        // two rows at once (count 2 of the row type) starting at row 1
        let v = unsafe { View::with_count_and_datatype(&m[N..], 2, &row_t) };
        one.send_with_tag(&v, 1);
        // column 2, received as a contiguous vector on the other side
        let v = unsafe { View::with_count_and_datatype(&m[2..], 1, &col_t) };
        one.send_with_tag(&v, 2);
        // column 4, received into column 1 of a matrix on the other side
        let v = unsafe { View::with_count_and_datatype(&m[4..], 1, &col_t) };
        one.send_with_tag(&v, 3);
        // the upper triangle, twice (indexed and hindexed)
        let v = unsafe { View::with_count_and_datatype(&m[..], 1, &upper_t) };
        one.send_with_tag(&v, 4);
        let v = unsafe { View::with_count_and_datatype(&m[..], 1, &upper_bytes_t) };
        one.send_with_tag(&v, 5);
    } else if rank == 1 {
        let src = matrix(0);
        // 12 plain doubles match 2 rows
        let mut rows = [0.0f64; 2 * N];
        let st = zero.receive_into_with_tag(&mut rows[..], 1);
        assert_eq!(st.count(f64::equivalent_datatype()), 2 * N as Count);
        assert_eq!(&rows[..], &src[N..3 * N]);

        let mut col = [0.0f64; N];
        zero.receive_into_with_tag(&mut col[..], 2);
        for i in 0..N {
            assert_eq!(col[i], src[i * N + 2]);
        }

        let mut mat = vec![-1.0f64; N * N];
        {
            let mut mv = unsafe { MutView::with_count_and_datatype(&mut mat[1..], 1, &col_t) };
            let st = zero.receive_into_with_tag(&mut mv, 3);
            assert_eq!(st.count(f64::equivalent_datatype()), N as Count);
        }
        for i in 0..N {
            for j in 0..N {
                let want = if j == 1 { src[i * N + 4] } else { -1.0 };
                assert_eq!(mat[i * N + j], want);
            }
        }

        let (tri, _) = zero.receive_vec_with_tag::<f64>(4);
        assert_eq!(tri.len(), N * (N + 1) / 2);
        let expected: Vec<f64> = (0..N)
            .flat_map(|i| (i..N).map(move |j| (i, j)))
            .map(|(i, j)| src[i * N + j])
            .collect();
        assert_eq!(tri, expected);

        let mut tri_mat = vec![0.0f64; N * N];
        {
            let mut mv = unsafe { MutView::with_count_and_datatype(&mut tri_mat[..], 1, &upper_t) };
            zero.receive_into_with_tag(&mut mv, 5);
        }
        for i in 0..N {
            for j in 0..N {
                let want = if j >= i { src[i * N + j] } else { 0.0 };
                assert_eq!(tri_mat[i * N + j], want);
            }
        }
    }

    // a structured type that nests a user type: { i32 id; [f64; N] row } in one buffer of
    // i64 words: id in word 0, row in words 1..=N (f64 bits), sent with View/MutView.
    let int_t = i32::equivalent_datatype();
    let rec_t = UserDatatype::structured(
        &[1, 1],
        &[0, 8],
        &[
            UncommittedDatatypeRef::from(int_t),
            UncommittedDatatypeRef::from(&row_t),
        ],
    );
    let mut words = [0i64; 1 + N];
    if rank == 0 {
        words[0] = 4242;
        for (i, w) in words[1..].iter_mut().enumerate() {
            *w = (i as f64 * 1.5).to_bits() as i64;
        }
    }
    {
        let mut mv = unsafe { MutView::with_count_and_datatype(&mut words[..], 1, &rec_t) };
        zero.broadcast_into(&mut mv);
    }
    assert_eq!(words[0] as i32, 4242);
    for (i, w) in words[1..].iter().enumerate() {
        assert_eq!(f64::from_bits(*w as u64), i as f64 * 1.5);
    }

    // columns in collectives: every rank gets column `rank % N` of rank 0's matrix
    let mut mine = matrix(-1);
    if rank == 0 {
        mine = matrix(7);
    }
    for c in 0..N {
        let mut mv = unsafe { MutView::with_count_and_datatype(&mut mine[c..], 1, &col_t) };
        zero.broadcast_into(&mut mv);
    }
    assert_eq!(mine, matrix(7));

    // gather one row-type element from every rank
    let row: Vec<f64> = (0..N).map(|i| rank as f64 + i as f64 * 0.1).collect();
    let send = unsafe { View::with_count_and_datatype(&row[..], 1, &row_t) };
    if rank == 0 {
        let mut all = vec![0.0f64; N * size as usize];
        let mut recv = unsafe { MutView::with_count_and_datatype(&mut all[..], size, &row_t) };
        zero.gather_into_root(&send, &mut recv);
        for r in 0..size as usize {
            for i in 0..N {
                assert_eq!(all[r * N + i], r as f64 + i as f64 * 0.1);
            }
        }
    } else {
        zero.gather_into(&send);
    }

    // the hand-written Equivalence: single values, vectors, all-to-all
    let next = world.process_at_rank((rank + 1) % size);
    let left = (rank + size - 1) % size;
    let prev = world.process_at_rank(left);
    let cells: Vec<Cell> = (0..5).map(|k| cell(rank, k)).collect();
    let (got, st) = if rank == 0 {
        next.send(&cells[..]);
        prev.receive_vec::<Cell>()
    } else {
        let r = prev.receive_vec::<Cell>();
        next.send(&cells[..]);
        r
    };
    assert_eq!(st.count(Cell::equivalent_datatype()), 5);
    assert_eq!(got, (0..5).map(|k| cell(left, k)).collect::<Vec<_>>());
    let out: Vec<Cell> = (0..size).map(|k| cell(rank, k)).collect();
    let mut inb = vec![Cell::default(); size as usize];
    world.all_to_all_into(&out[..], &mut inb[..]);
    for (r, c) in inb.iter().enumerate() {
        assert_eq!(*c, cell(r as i32, rank));
    }

    world.barrier();
    if rank == 0 {
        println!("user_datatypes ok");
    }
}
