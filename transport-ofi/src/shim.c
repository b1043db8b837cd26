/*
 * The C side of rsmpi's libfabric transport (cargo feature `libfabric`).
 *
 * libfabric's data-path API is almost entirely `static inline` functions that call
 * through provider ops tables, which Rust cannot call (and bindgen cannot bind). This
 * file turns the handful of calls the transport needs into plain functions. Only opaque
 * pointers and the small POD structs defined below cross into Rust; no libfabric
 * structure layout is mirrored there.
 *
 * Return convention of the data-path calls: 0 = done, RSOFI_AGAIN = the provider said
 * -FI_EAGAIN (resources busy: progress and retry), a negative value = -fi_errno.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/uio.h>
#include <errno.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define RSOFI_API FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)
#define RSOFI_AGAIN 1
/* fi_cq_read: an error entry is waiting (read it with rsofi_cq_readerr) */
#define RSOFI_CQ_ERR 2

/* Which kind of address an fi_info offers (rsofi_info_desc.addr_kind). */
enum {
    RSOFI_ADDR_OTHER = 0,    /* not an IP address (shm names, ...) */
    RSOFI_ADDR_LOOPBACK = 1, /* 127.0.0.0/8, ::1, or the domain `lo` */
    RSOFI_ADDR_LINKLOCAL = 2,/* fe80::/10 */
    RSOFI_ADDR_ROUTABLE = 3, /* any other IPv4/IPv6 address */
};

/* What Rust needs to know about one fi_getinfo result, flattened into our own flags. */
struct rsofi_info_desc {
    char prov[64];
    char fabric[64];
    char domain[64];
    uint32_t addr_kind;
    uint32_t ep_rdm;
    uint32_t mr_local, mr_virt_addr, mr_raw;
    uint32_t order_saw;            /* in both tx_attr and rx_attr msg_order */
    uint32_t needs_context;        /* mode asks for FI_CONTEXT / FI_CONTEXT2 */
    uint64_t inject_size;
    uint64_t max_msg_size;
};

/* One completion: our context value and the received length. */
struct rsofi_comp {
    uint64_t ctx;
    uint64_t len;
};

/* Classes of completion errors (rsofi_cqerr.kind). */
enum {
    RSOFI_ERR_OTHER = 0,
    RSOFI_ERR_UNREACHABLE = 1, /* connection refused/reset/..., peer gone */
    RSOFI_ERR_ACCESS = 2,      /* bad or revoked key, out of the registered range */
    RSOFI_ERR_CANCELED = 3,    /* operation canceled (endpoint closing) */
};

struct rsofi_cqerr {
    uint64_t ctx;
    int32_t err;        /* positive fi_errno */
    int32_t prov_errno;
    uint32_t kind;
};

/* Everything that makes an endpoint, closed in reverse. */
struct rsofi_ep {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    uint64_t mr_mode;
};

/* Sizes of our POD structs, so that Rust can check its declarations against them. */
void rsofi_abi_sizes(size_t out[3])
{
    out[0] = sizeof(struct rsofi_info_desc);
    out[1] = sizeof(struct rsofi_comp);
    out[2] = sizeof(struct rsofi_cqerr);
}

const char *rsofi_strerror(int err) { return fi_strerror(err < 0 ? -err : err); }

int rsofi_getinfo(const char *prov, uint32_t order_saw, uint32_t order_sas,
                  uint32_t manual_progress, struct fi_info **out)
{
    struct fi_info *hints = fi_allocinfo();
    int rc;
    uint64_t order = 0;
    if (!hints)
        return -FI_ENOMEM;
    hints->caps = FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_READ | FI_WRITE |
                  FI_REMOTE_READ | FI_REMOTE_WRITE;
    /* We pass plain integers as operation contexts: no FI_CONTEXT/FI_CONTEXT2. */
    hints->mode = 0;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                  FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
    if (manual_progress) {
        hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
        hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
    }
    if (order_sas)
        order |= FI_ORDER_SAS;
    if (order_saw)
        order |= FI_ORDER_SAW;
    hints->tx_attr->msg_order = order;
    hints->rx_attr->msg_order = order;
    if (prov && *prov) {
        hints->fabric_attr->prov_name = strdup(prov); /* freed by fi_freeinfo */
        if (!hints->fabric_attr->prov_name) {
            fi_freeinfo(hints);
            return -FI_ENOMEM;
        }
    }
    *out = NULL;
    rc = fi_getinfo(RSOFI_API, NULL, NULL, 0, hints, out);
    fi_freeinfo(hints);
    return rc;
}

static struct fi_info *nth(struct fi_info *list, size_t idx)
{
    while (list && idx--)
        list = list->next;
    return list;
}

size_t rsofi_info_count(struct fi_info *list)
{
    size_t n = 0;
    for (; list; list = list->next)
        n++;
    return n;
}

static uint32_t addr_kind(const struct fi_info *i)
{
    if (i->domain_attr && i->domain_attr->name && strcmp(i->domain_attr->name, "lo") == 0)
        return RSOFI_ADDR_LOOPBACK;
    if (!i->src_addr)
        return RSOFI_ADDR_OTHER;
    if (i->addr_format == FI_SOCKADDR_IN && i->src_addrlen >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *s = i->src_addr;
        return (ntohl(s->sin_addr.s_addr) >> 24) == 127 ? RSOFI_ADDR_LOOPBACK
                                                         : RSOFI_ADDR_ROUTABLE;
    }
    if (i->addr_format == FI_SOCKADDR_IN6 && i->src_addrlen >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *s = i->src_addr;
        if (IN6_IS_ADDR_LOOPBACK(&s->sin6_addr))
            return RSOFI_ADDR_LOOPBACK;
        if (IN6_IS_ADDR_LINKLOCAL(&s->sin6_addr))
            return RSOFI_ADDR_LINKLOCAL;
        if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr))
            return s->sin6_addr.s6_addr[12] == 127 ? RSOFI_ADDR_LOOPBACK : RSOFI_ADDR_ROUTABLE;
        return RSOFI_ADDR_ROUTABLE;
    }
    return RSOFI_ADDR_OTHER;
}

static void copy_name(char *dst, const char *src)
{
    snprintf(dst, 64, "%s", src ? src : "");
}

int rsofi_info_describe(struct fi_info *list, size_t idx, struct rsofi_info_desc *d)
{
    const struct fi_info *i = nth(list, idx);
    uint64_t mr, both;
    if (!i)
        return -FI_EINVAL;
    memset(d, 0, sizeof(*d));
    copy_name(d->prov, i->fabric_attr ? i->fabric_attr->prov_name : NULL);
    copy_name(d->fabric, i->fabric_attr ? i->fabric_attr->name : NULL);
    copy_name(d->domain, i->domain_attr ? i->domain_attr->name : NULL);
    d->addr_kind = addr_kind(i);
    d->ep_rdm = i->ep_attr && i->ep_attr->type == FI_EP_RDM;
    mr = i->domain_attr ? (uint64_t)i->domain_attr->mr_mode : 0;
    d->mr_local = !!(mr & FI_MR_LOCAL) || !!(i->mode & FI_LOCAL_MR);
    d->mr_virt_addr = !!(mr & FI_MR_VIRT_ADDR);
    d->mr_raw = !!(mr & FI_MR_RAW);
    both = (i->tx_attr ? i->tx_attr->msg_order : 0) & (i->rx_attr ? i->rx_attr->msg_order : 0);
    d->order_saw = !!(both & FI_ORDER_SAW);
    d->needs_context = !!(i->mode & (FI_CONTEXT | FI_CONTEXT2));
    d->inject_size = i->tx_attr ? i->tx_attr->inject_size : 0;
    d->max_msg_size = i->ep_attr ? i->ep_attr->max_msg_size : 0;
    return 0;
}

void rsofi_freeinfo(struct fi_info *list)
{
    if (list)
        fi_freeinfo(list);
}

static int fail(int rc, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s (%d)", what, fi_strerror(-rc), rc);
    return rc;
}

/* Closes what `open` built, in reverse (endpoint, completion queue, address vector),
 * leaving domain and fabric open for the memory regions that still need closing. */
void rsofi_shutdown(struct rsofi_ep *e)
{
    if (e->ep) {
        fi_close(&e->ep->fid);
        e->ep = NULL;
    }
    if (e->cq) {
        fi_close(&e->cq->fid);
        e->cq = NULL;
    }
    if (e->av) {
        fi_close(&e->av->fid);
        e->av = NULL;
    }
}

/* Closes domain and fabric (after every memory region) and frees the handle. */
void rsofi_free(struct rsofi_ep *e)
{
    rsofi_shutdown(e);
    if (e->domain)
        fi_close(&e->domain->fid);
    if (e->fabric)
        fi_close(&e->fabric->fid);
    if (e->info)
        fi_freeinfo(e->info);
    free(e);
}

/* Opens fabric, domain, a completion queue, a table AV of `av_count` entries and an RDM
 * endpoint bound to both, and enables it. */
int rsofi_open(struct fi_info *list, size_t idx, size_t av_count, struct rsofi_ep **out,
               char *err, size_t errlen)
{
    struct fi_info *i = nth(list, idx);
    struct rsofi_ep *e;
    struct fi_cq_attr cq_attr;
    struct fi_av_attr av_attr;
    int rc;

    *out = NULL;
    if (!i)
        return fail(-FI_EINVAL, "no such fi_info", err, errlen);
    e = calloc(1, sizeof(*e));
    if (!e)
        return fail(-FI_ENOMEM, "calloc", err, errlen);
    e->info = fi_dupinfo(i);
    if (!e->info) {
        free(e);
        return fail(-FI_ENOMEM, "fi_dupinfo", err, errlen);
    }
    e->mr_mode = (uint64_t)e->info->domain_attr->mr_mode;

    rc = fi_fabric(e->info->fabric_attr, &e->fabric, NULL);
    if (rc) {
        fail(rc, "fi_fabric", err, errlen);
        goto out;
    }
    rc = fi_domain(e->fabric, e->info, &e->domain, NULL);
    if (rc) {
        fail(rc, "fi_domain", err, errlen);
        goto out;
    }
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_NONE;
    cq_attr.size = e->info->tx_attr->size + e->info->rx_attr->size;
    rc = fi_cq_open(e->domain, &cq_attr, &e->cq, NULL);
    if (rc) {
        fail(rc, "fi_cq_open", err, errlen);
        goto out;
    }
    memset(&av_attr, 0, sizeof(av_attr));
    av_attr.type = FI_AV_TABLE;
    av_attr.count = av_count;
    rc = fi_av_open(e->domain, &av_attr, &e->av, NULL);
    if (rc) {
        fail(rc, "fi_av_open", err, errlen);
        goto out;
    }
    rc = fi_endpoint(e->domain, e->info, &e->ep, NULL);
    if (rc) {
        fail(rc, "fi_endpoint", err, errlen);
        goto out;
    }
    rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc) {
        fail(rc, "fi_ep_bind(cq)", err, errlen);
        goto out;
    }
    rc = fi_ep_bind(e->ep, &e->av->fid, 0);
    if (rc) {
        fail(rc, "fi_ep_bind(av)", err, errlen);
        goto out;
    }
    rc = fi_enable(e->ep);
    if (rc) {
        fail(rc, "fi_enable", err, errlen);
        goto out;
    }
    *out = e;
    return 0;
out:
    rsofi_free(e);
    return rc;
}

int rsofi_getname(struct rsofi_ep *e, void *buf, size_t *len)
{
    return fi_getname(&e->ep->fid, buf, len);
}

/* Inserts one address (as fi_getname produced it) and returns its fi_addr. */
int rsofi_av_insert(struct rsofi_ep *e, const void *addr, uint64_t *fi_addr)
{
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    int rc = fi_av_insert(e->av, addr, 1, &a, 0, NULL);
    *fi_addr = a;
    if (rc == 1)
        return 0;
    return rc < 0 ? rc : -FI_EADDRNOTAVAIL;
}

/* Access flags for rsofi_mr_reg (our own encoding). */
enum {
    RSOFI_ACC_SEND = 1,
    RSOFI_ACC_RECV = 2,
    RSOFI_ACC_READ = 4,   /* local buffer of an fi_read */
    RSOFI_ACC_WRITE = 8,  /* local buffer of an fi_write */
    RSOFI_ACC_REMOTE = 16 /* FI_REMOTE_READ | FI_REMOTE_WRITE */
};

/* Registers [buf, buf+len) (len > 0) and, where the provider binds memory regions to
 * endpoints (FI_MR_ENDPOINT), binds it to ours and enables it. */
int rsofi_mr_reg(struct rsofi_ep *e, void *buf, size_t len, uint32_t acc, uint64_t key,
                 struct fid_mr **out, void **desc, uint64_t *out_key)
{
    uint64_t access = 0;
    struct fid_mr *mr = NULL;
    int rc;
    if (acc & RSOFI_ACC_SEND)
        access |= FI_SEND;
    if (acc & RSOFI_ACC_RECV)
        access |= FI_RECV;
    if (acc & RSOFI_ACC_READ)
        access |= FI_READ;
    if (acc & RSOFI_ACC_WRITE)
        access |= FI_WRITE;
    if (acc & RSOFI_ACC_REMOTE)
        access |= FI_REMOTE_READ | FI_REMOTE_WRITE;
    *out = NULL;
    rc = fi_mr_reg(e->domain, buf, len, access, 0, key, 0, &mr, NULL);
    if (rc)
        return rc;
    if (e->mr_mode & FI_MR_ENDPOINT) {
        rc = fi_mr_bind(mr, &e->ep->fid, 0);
        if (!rc)
            rc = fi_mr_enable(mr);
        if (rc) {
            fi_close(&mr->fid);
            return rc;
        }
    }
    *out = mr;
    *desc = fi_mr_desc(mr);
    *out_key = fi_mr_key(mr);
    return 0;
}

int rsofi_mr_close(struct fid_mr *mr)
{
    return fi_close(&mr->fid);
}

static int post_rc(ssize_t rc)
{
    if (rc == -FI_EAGAIN)
        return RSOFI_AGAIN;
    return (int)rc;
}

int rsofi_recv(struct rsofi_ep *e, void *buf, size_t len, void *desc, uint64_t ctx)
{
    return post_rc(fi_recv(e->ep, buf, len, desc, FI_ADDR_UNSPEC, (void *)(uintptr_t)ctx));
}

int rsofi_send(struct rsofi_ep *e, const void *buf, size_t len, void *desc, uint64_t dest,
               uint64_t ctx)
{
    return post_rc(fi_send(e->ep, buf, len, desc, dest, (void *)(uintptr_t)ctx));
}

int rsofi_inject(struct rsofi_ep *e, const void *buf, size_t len, uint64_t dest)
{
    return post_rc(fi_inject(e->ep, buf, len, dest));
}

int rsofi_write(struct rsofi_ep *e, const void *buf, size_t len, void *desc, uint64_t dest,
                uint64_t raddr, uint64_t key, uint64_t ctx, uint32_t delivery_complete)
{
    struct iovec iov;
    struct fi_rma_iov rma;
    struct fi_msg_rma msg;
    if (!delivery_complete)
        return post_rc(fi_write(e->ep, buf, len, desc, dest, raddr, key,
                                (void *)(uintptr_t)ctx));
    iov.iov_base = (void *)buf;
    iov.iov_len = len;
    rma.addr = raddr;
    rma.len = len;
    rma.key = key;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = dest;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = (void *)(uintptr_t)ctx;
    return post_rc(fi_writemsg(e->ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE));
}

int rsofi_read(struct rsofi_ep *e, void *buf, size_t len, void *desc, uint64_t dest,
               uint64_t raddr, uint64_t key, uint64_t ctx)
{
    return post_rc(fi_read(e->ep, buf, len, desc, dest, raddr, key, (void *)(uintptr_t)ctx));
}

/* Reads up to `cap` (<= 64) completions into `out`; *n = how many. Returns 0,
 * RSOFI_CQ_ERR when an error entry is at the head of the queue, or -fi_errno. */
int rsofi_cq_read(struct rsofi_ep *e, struct rsofi_comp *out, size_t cap, size_t *n)
{
    struct fi_cq_data_entry ent[64];
    ssize_t rc;
    size_t k;
    *n = 0;
    if (cap > 64)
        cap = 64;
    rc = fi_cq_read(e->cq, ent, cap);
    if (rc == -FI_EAGAIN)
        return 0;
    if (rc == -FI_EAVAIL)
        return RSOFI_CQ_ERR;
    if (rc < 0)
        return (int)rc;
    for (k = 0; k < (size_t)rc; k++) {
        out[k].ctx = (uint64_t)(uintptr_t)ent[k].op_context;
        out[k].len = ent[k].len;
    }
    *n = (size_t)rc;
    return 0;
}

static uint32_t classify(int err)
{
    switch (err) {
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
    case FI_EHOSTUNREACH:
    case FI_EHOSTDOWN:
    case FI_ENETUNREACH:
    case FI_ENETDOWN:
    case FI_ETIMEDOUT:
    case EPIPE:
    case FI_EADDRNOTAVAIL:
        return RSOFI_ERR_UNREACHABLE;
    case FI_EACCES:
    case FI_EPERM:
    case FI_EKEYREJECTED:
    case FI_ENOKEY:
    case FI_EREMOTEIO:
    case FI_EFAULT:
        return RSOFI_ERR_ACCESS;
    case FI_ECANCELED:
        return RSOFI_ERR_CANCELED;
    default:
        return RSOFI_ERR_OTHER;
    }
}

uint32_t rsofi_classify(int err) { return classify(err < 0 ? -err : err); }

/* Reads the error entry at the head of the queue. `msg` receives fi_strerror of the
 * error plus the provider's fi_cq_strerror text. Returns 0, RSOFI_AGAIN when there was
 * none, or -fi_errno. */
int rsofi_cq_readerr(struct rsofi_ep *e, struct rsofi_cqerr *out, char *msg, size_t msglen)
{
    struct fi_cq_err_entry ee;
    char prov[256];
    const char *ptext;
    ssize_t rc;
    memset(&ee, 0, sizeof(ee));
    rc = fi_cq_readerr(e->cq, &ee, 0);
    if (rc == -FI_EAGAIN || rc == 0)
        return RSOFI_AGAIN;
    if (rc < 0)
        return (int)rc;
    out->ctx = (uint64_t)(uintptr_t)ee.op_context;
    out->err = ee.err;
    out->prov_errno = ee.prov_errno;
    out->kind = classify(ee.err);
    prov[0] = 0;
    ptext = fi_cq_strerror(e->cq, ee.prov_errno, ee.err_data, prov, sizeof(prov));
    snprintf(msg, msglen, "%s (provider: %s)", fi_strerror(ee.err), ptext ? ptext : prov);
    return 0;
}
