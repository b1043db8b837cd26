/* The C side of rsmpi's verbs transport: a thin layer over libibverbs.
 *
 * libibverbs is opened at run time with dlopen (no link-time dependency), so that a
 * binary built with verbs support starts on machines without the library or without
 * an RDMA device and falls back to shared memory. Only the non-inline entry points are
 * looked up with dlsym; the data path (ibv_post_send, ibv_poll_cq) is inline in
 * <infiniband/verbs.h> and calls the provider through the context's function table.
 * The header's macros that would reference libibverbs symbols directly
 * (ibv_reg_mr, ibv_query_port) are never used: calls go through the pointers below.
 *
 * Every function returns 0 / a pointer on success and fills `err` (at most `errlen`
 * bytes, NUL-terminated) on failure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    int loaded;
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    const char *(*get_device_name)(struct ibv_device *);
    struct ibv_context *(*open_device)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
    int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    int (*dealloc_pd)(struct ibv_pd *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
    int (*destroy_cq)(struct ibv_cq *);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*destroy_qp)(struct ibv_qp *);
    const char *(*wc_status_str)(enum ibv_wc_status);
} V;

static void say(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

#define SYM(field, name)                                                           \
    do {                                                                           \
        *(void **)&V.field = dlsym(h, name);                                       \
        if (!V.field) {                                                            \
            say(err, errlen, "libibverbs.so.1 lacks %s", name);                    \
            return -1;                                                             \
        }                                                                          \
    } while (0)

int rsv_load(char *err, size_t errlen)
{
    void *h;
    if (V.loaded)
        return 0;
    h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        say(err, errlen, "cannot load libibverbs.so.1 (%s)", dlerror());
        return -1;
    }
    SYM(get_device_list, "ibv_get_device_list");
    SYM(free_device_list, "ibv_free_device_list");
    SYM(get_device_name, "ibv_get_device_name");
    SYM(open_device, "ibv_open_device");
    SYM(close_device, "ibv_close_device");
    SYM(query_device, "ibv_query_device");
    SYM(query_port, "ibv_query_port");
    SYM(query_gid, "ibv_query_gid");
    SYM(alloc_pd, "ibv_alloc_pd");
    SYM(dealloc_pd, "ibv_dealloc_pd");
    SYM(reg_mr, "ibv_reg_mr");
    SYM(dereg_mr, "ibv_dereg_mr");
    SYM(create_cq, "ibv_create_cq");
    SYM(destroy_cq, "ibv_destroy_cq");
    SYM(create_qp, "ibv_create_qp");
    SYM(modify_qp, "ibv_modify_qp");
    SYM(destroy_qp, "ibv_destroy_qp");
    SYM(wc_status_str, "ibv_wc_status_str");
    V.loaded = 1;
    return 0;
}

/* What the Rust side needs to know about the opened device and port. */
struct rsv_info {
    char name[64];
    uint8_t gid[16];
    int gid_index;   /* -1: no GID used (InfiniBand LID routing) */
    uint16_t lid;
    uint8_t port;
    uint8_t link_layer; /* IBV_LINK_LAYER_* */
    uint8_t active_mtu; /* enum ibv_mtu */
    uint8_t max_rd_atomic;
    uint32_t max_inline;
    uint32_t max_qp_wr;
    uint32_t max_cqe;
    uint64_t max_mr_size;
};

struct rsv_dev {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct rsv_info info;
};

/* 1 if /sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<i> says RoCE v2. */
static int gid_is_rocev2(const char *dev, int port, int i)
{
    char path[256], buf[32] = {0};
    FILE *f;
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev,
             port, i);
    f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(buf, sizeof buf, f))
        buf[0] = 0;
    fclose(f);
    return strncmp(buf, "RoCE v2", 7) == 0;
}

/* GID choice for RoCE: the asked index; else the first RoCE v2 GID holding an IPv4
 * address (::ffff:a.b.c.d), routable over IP; else the first RoCE v2 GID; else the
 * first non-zero one. */
static int pick_gid(struct rsv_dev *d, int asked, int tbl_len, char *err, size_t errlen)
{
    union ibv_gid g;
    int i, best = -1, rank = 0;
    if (asked >= 0) {
        if (V.query_gid(d->ctx, d->info.port, asked, &g)) {
            say(err, errlen, "%s port %d: no GID at index %d", d->info.name, d->info.port, asked);
            return -1;
        }
        memcpy(d->info.gid, g.raw, 16);
        return asked;
    }
    for (i = 0; i < tbl_len; i++) {
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        int r, zero = 1, k;
        if (V.query_gid(d->ctx, d->info.port, i, &g))
            continue;
        for (k = 0; k < 16; k++)
            zero &= g.raw[k] == 0;
        if (zero)
            continue;
        r = 1;
        if (gid_is_rocev2(d->info.name, d->info.port, i))
            r = memcmp(g.raw, v4, 12) == 0 ? 3 : 2;
        if (r > rank) {
            rank = r;
            best = i;
            memcpy(d->info.gid, g.raw, 16);
        }
    }
    if (best < 0)
        say(err, errlen, "%s port %d: no usable GID (is the interface up and addressed?)",
            d->info.name, d->info.port);
    return best;
}

/* Opens `name` (NULL or "": the first device with an active `port`), allocates the
 * protection domain and one completion queue of `cqe` entries. */
struct rsv_dev *rsv_open(const char *name, int port, int gid_index, int cqe, char *err,
                         size_t errlen)
{
    struct ibv_device **list;
    int n = 0, i;
    struct rsv_dev *d = calloc(1, sizeof *d);
    if (!d) {
        say(err, errlen, "out of memory");
        return NULL;
    }
    if (rsv_load(err, errlen))
        goto fail;
    list = V.get_device_list(&n);
    if (!list || n == 0) {
        say(err, errlen, "no RDMA device found");
        if (list)
            V.free_device_list(list);
        goto fail;
    }
    for (i = 0; i < n; i++) {
        struct ibv_port_attr pa;
        const char *dn = V.get_device_name(list[i]);
        if (name && *name && strcmp(name, dn) != 0)
            continue;
        d->ctx = V.open_device(list[i]);
        if (!d->ctx)
            continue;
        memset(&pa, 0, sizeof pa);
        if (V.query_port(d->ctx, (uint8_t)port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
            snprintf(d->info.name, sizeof d->info.name, "%s", dn);
            d->info.port = (uint8_t)port;
            d->info.lid = pa.lid;
            d->info.link_layer = pa.link_layer;
            d->info.active_mtu = (uint8_t)pa.active_mtu;
            d->info.gid_index = pa.gid_tbl_len;
            break;
        }
        if (name && *name) {
            say(err, errlen, "RDMA device %s: port %d is not active", dn, port);
            V.close_device(d->ctx);
            d->ctx = NULL;
            V.free_device_list(list);
            goto fail;
        }
        V.close_device(d->ctx);
        d->ctx = NULL;
    }
    V.free_device_list(list);
    if (!d->ctx) {
        if (name && *name)
            say(err, errlen, "no RDMA device named %s", name);
        else
            say(err, errlen, "no RDMA device with an active port %d", port);
        goto fail;
    }
    {
        struct ibv_device_attr da;
        int tbl = d->info.gid_index;
        if (V.query_device(d->ctx, &da)) {
            say(err, errlen, "ibv_query_device: %s", strerror(errno));
            goto fail_ctx;
        }
        d->info.max_qp_wr = (uint32_t)da.max_qp_wr;
        d->info.max_cqe = (uint32_t)da.max_cqe;
        d->info.max_mr_size = da.max_mr_size;
        d->info.max_rd_atomic = (uint8_t)(da.max_qp_rd_atom < da.max_qp_init_rd_atom
                                              ? da.max_qp_rd_atom
                                              : da.max_qp_init_rd_atom);
        if (d->info.link_layer == IBV_LINK_LAYER_INFINIBAND && gid_index < 0) {
            d->info.gid_index = -1; /* LID routing */
        } else {
            d->info.gid_index = pick_gid(d, gid_index, tbl, err, errlen);
            if (d->info.gid_index < 0)
                goto fail_ctx;
        }
    }
    d->pd = V.alloc_pd(d->ctx);
    if (!d->pd) {
        say(err, errlen, "ibv_alloc_pd: %s", strerror(errno));
        goto fail_ctx;
    }
    if (cqe > (int)d->info.max_cqe)
        cqe = (int)d->info.max_cqe;
    d->cq = V.create_cq(d->ctx, cqe, NULL, NULL, 0);
    if (!d->cq) {
        say(err, errlen, "ibv_create_cq(%d): %s", cqe, strerror(errno));
        goto fail_pd;
    }
    return d;
fail_pd:
    V.dealloc_pd(d->pd);
fail_ctx:
    V.close_device(d->ctx);
fail:
    free(d);
    return NULL;
}

const struct rsv_info *rsv_info(const struct rsv_dev *d) { return &d->info; }

void rsv_close(struct rsv_dev *d)
{
    if (!d)
        return;
    V.destroy_cq(d->cq);
    V.dealloc_pd(d->pd);
    V.close_device(d->ctx);
    free(d);
}

/* Registers [addr, addr + len) with `access` (IBV_ACCESS_* bits). */
struct ibv_mr *rsv_reg(struct rsv_dev *d, void *addr, size_t len, int access, uint32_t *lkey,
                       uint32_t *rkey, char *err, size_t errlen)
{
    struct ibv_mr *mr = V.reg_mr(d->pd, addr, len, access);
    if (!mr) {
        say(err, errlen, "ibv_reg_mr(%zu bytes): %s", len, strerror(errno));
        return NULL;
    }
    *lkey = mr->lkey;
    *rkey = mr->rkey;
    return mr;
}

int rsv_dereg(struct ibv_mr *mr) { return V.dereg_mr(mr); }

/* An RC queue pair on the device's completion queue, in state INIT. */
struct ibv_qp *rsv_qp_create(struct rsv_dev *d, uint32_t sq_depth, uint32_t max_inline,
                             uint32_t *qpn, uint32_t *got_inline, char *err, size_t errlen)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr a;
    struct ibv_qp *qp;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = d->cq;
    ia.recv_cq = d->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0;
    ia.cap.max_send_wr = sq_depth;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = max_inline;
    qp = V.create_qp(d->pd, &ia);
    if (!qp) {
        say(err, errlen, "ibv_create_qp(RC, %u work requests, %u inline bytes): %s", sq_depth,
            max_inline, strerror(errno));
        return NULL;
    }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = d->info.port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                IBV_QP_ACCESS_FLAGS)) {
        say(err, errlen, "ibv_modify_qp(INIT): %s", strerror(errno));
        V.destroy_qp(qp);
        return NULL;
    }
    *qpn = qp->qp_num;
    *got_inline = ia.cap.max_inline_data;
    return qp;
}

/* Moves `qp` to RTR and RTS, connected to the remote QP `rqpn` at `rlid` / `rgid`. */
int rsv_qp_connect(struct rsv_dev *d, struct ibv_qp *qp, uint32_t rqpn, uint16_t rlid,
                   const uint8_t *rgid, uint32_t my_psn, uint32_t remote_psn, char *err,
                   size_t errlen)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)d->info.active_mtu;
    a.dest_qp_num = rqpn;
    a.rq_psn = remote_psn;
    a.max_dest_rd_atomic = d->info.max_rd_atomic ? d->info.max_rd_atomic : 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = rlid;
    a.ah_attr.sl = 0;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.port_num = d->info.port;
    if (d->info.gid_index >= 0) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, rgid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)d->info.gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    if (V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                IBV_QP_MIN_RNR_TIMER)) {
        say(err, errlen, "ibv_modify_qp(RTR, remote QP %u): %s", rqpn, strerror(errno));
        return -1;
    }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14; /* 4.096 us * 2^14 = 67 ms per try, 7 tries */
    a.retry_cnt = 6; /* 7 means "retry for ever" to some devices (rxe) */
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = d->info.max_rd_atomic ? d->info.max_rd_atomic : 1;
    if (V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
        say(err, errlen, "ibv_modify_qp(RTS): %s", strerror(errno));
        return -1;
    }
    return 0;
}

void rsv_qp_destroy(struct ibv_qp *qp)
{
    if (qp)
        V.destroy_qp(qp);
}

enum { RSV_SIGNALED = 1, RSV_INLINE = 2 };

/* Posts one RDMA WRITE (opcode 0) or READ (opcode 1). Returns 0 or an errno value. */
int rsv_post(struct ibv_qp *qp, int opcode, uint64_t wr_id, uint64_t laddr, uint32_t len,
             uint32_t lkey, uint64_t raddr, uint32_t rkey, int flags)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    sge.addr = laddr;
    sge.length = len;
    sge.lkey = lkey;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.opcode = opcode ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.send_flags = ((flags & RSV_SIGNALED) ? IBV_SEND_SIGNALED : 0) |
                    ((flags & RSV_INLINE) ? IBV_SEND_INLINE : 0);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

/* One completion, as the Rust side sees it. */
struct rsv_wc {
    uint64_t wr_id;
    uint32_t status; /* enum ibv_wc_status, 0 = success */
    uint32_t qp_num;
    uint32_t vendor_err;
};

/* Polls up to `max` (at most 32) completions into `out`; returns their number or -1. */
int rsv_poll(struct rsv_dev *d, int max, struct rsv_wc *out)
{
    struct ibv_wc wc[32];
    int n, i;
    if (max > 32)
        max = 32;
    n = ibv_poll_cq(d->cq, max, wc);
    for (i = 0; i < n; i++) {
        out[i].wr_id = wc[i].wr_id;
        out[i].status = (uint32_t)wc[i].status;
        out[i].qp_num = wc[i].qp_num;
        out[i].vendor_err = wc[i].vendor_err;
    }
    return n;
}

const char *rsv_status_str(uint32_t status)
{
    return V.loaded ? V.wc_status_str((enum ibv_wc_status)status) : "unknown status";
}

/* Status codes the Rust side maps to errors. */
uint32_t rsv_status_rem_access(void) { return IBV_WC_REM_ACCESS_ERR; }
uint32_t rsv_status_flush(void) { return IBV_WC_WR_FLUSH_ERR; }
int rsv_link_ethernet(void) { return IBV_LINK_LAYER_ETHERNET; }

/* ---- unmap notifications for the registration cache (userfaultfd) ----
 * A userfaultfd with the non-cooperative events UNMAP, REMOVE (madvise DONTNEED and
 * the like) and REMAP (mremap) reports every change of mapping in the ranges watched.
 * Ranges are watched in write-protect mode without write-protecting anything, so no
 * page fault is ever delivered: only the events. Returns the descriptor or -errno. */
int rsv_uffd_open(void)
{
    struct uffdio_api api;
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0)
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    memset(&api, 0, sizeof api);
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
    if (ioctl(fd, UFFDIO_API, &api)) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* Watches the pages of [start, start + len) (page-aligned). 0 or -errno (e.g. EINVAL
 * for memory that is not anonymous). */
int rsv_uffd_watch(int fd, uint64_t start, uint64_t len)
{
    struct uffdio_register r;
    memset(&r, 0, sizeof r);
    r.range.start = start;
    r.range.len = len;
    r.mode = UFFDIO_REGISTER_MODE_WP;
    return ioctl(fd, UFFDIO_REGISTER, &r) ? -errno : 0;
}

/* Waits up to `timeout_ms` for events: 1 ready, 0 not, -errno. */
int rsv_uffd_wait(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    return r < 0 ? -errno : r > 0;
}

/* Reads pending events into `out` as (start, end) pairs, at most `max` pairs; returns
 * their number or -errno. Never blocks. */
int rsv_uffd_read(int fd, uint64_t *out, int max)
{
    struct uffd_msg m[16];
    ssize_t got;
    int n = 0, i;
    if (max > 16)
        max = 16;
    got = read(fd, m, sizeof m[0] * (size_t)max);
    if (got < 0)
        return errno == EAGAIN ? 0 : -errno;
    for (i = 0; i < (int)(got / (ssize_t)sizeof m[0]); i++) {
        switch (m[i].event) {
        case UFFD_EVENT_UNMAP:
        case UFFD_EVENT_REMOVE:
            out[2 * n] = m[i].arg.remove.start;
            out[2 * n + 1] = m[i].arg.remove.end;
            n++;
            break;
        case UFFD_EVENT_REMAP:
            out[2 * n] = m[i].arg.remap.from;
            out[2 * n + 1] = m[i].arg.remap.from + m[i].arg.remap.len;
            n++;
            break;
        default:
            break;
        }
    }
    return n;
}

void rsv_uffd_close(int fd) { close(fd); }
