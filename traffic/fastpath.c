/* railab load engine fast path: paced RoCEv2 senders per QP, receivers, DCQCN's reaction point
 * and the notification point's CNP pacing, in compiled code.
 *
 * The narrow interface (railab.traffic.fastpath drives it through ctypes):
 *   dp_run(ctx)            send every QP at its rate until ctx->end_t / ctx->stop / every byte
 *                          flow done, then drain; counters land in the QP array as it runs
 *   dp_rp_* (below)        DCQCN's reaction point alone, fed with times and byte counts, so
 *                          tests compare it with railab.traffic.load.DcqcnRP without a lab
 *   dp_icrc(...)           the per-packet ICRC from the template's tables (tests compare it
 *                          with zlib over the whole frame)
 *
 * Python builds every frame (scapy), opens every socket (one AF_PACKET socket per server NIC,
 * one receive socket per server), and reads the counters; this file only moves packets and
 * keeps per-QP state. No line of another project is in it. Times are CLOCK_MONOTONIC seconds
 * as doubles (the same clock as Python's time.monotonic()), rates bits/s, sizes bytes.
 *
 * Rules it implements (each also in railab.traffic.load, the reference in Python):
 *   DCQCN RP: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015,
 *     section 3 and Fig. 7: cut RC *= 1 - alpha/2 on a CNP, alpha = (1-g) alpha + g; alpha
 *     timer decay; rate-increase events per timer period and per byte counter, fast recovery /
 *     additive / hyper increase, RC = (RT + RC) / 2.
 *   DCQCN RP, rules 1 (dp_rp_ns3, railab.traffic.load.Ns3MlxRP): HPCC's ns-3 (rdma-hw.cc,
 *     CC_MODE 1) as railab reads it: alpha per period up if a CNP came in it, else down; cuts
 *     on a periodic check one interval after the first CNP; increase from the timer alone,
 *     hyper by a constant R_HAI. For side-by-side runs with ns-3's stored results only.
 *   NP: one CNP per QP per cnp_interval at most (DCQCN paper; IBTA Annex A17.9.3 CNP format);
 *     cnp_interval 0: one per marked packet (ns-3's NP).
 *   PSN: 24-bit, out-of-order = a PSN below the highest seen (reorder depth in packets).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/if_packet.h>

#define DP_ABI 12
#define OOO_WINDOW 4096
#define BUSY_MAX_S 0.005      /* a worker that has not waited for this long ... */
#define BUSY_REST_S 0.0005    /* ... sleeps this long: at most ~91 % of a core, so FRR (BFD), the
                               * port sampler and the kernel's softirq thread always get a turn */
#define MAX_THREADS 16
#define MASK24 0xFFFFFFu
#define OP_FIRST 0
#define OP_MIDDLE 1
#define OP_LAST 2
#define OP_ONLY 3
#define RX_BATCH 64
#define RX_SNAP 128
#define BTH_OFF (14 + 20 + 8)

typedef struct {              /* one frame template: bytes patched per packet */
    uint8_t *frame;
    uint32_t len;
    uint32_t c0;              /* ICRC with PSN bytes and ack-request bit zero */
    uint32_t ta;              /* the ack-request bit's ICRC contribution */
    uint32_t pad;
    uint32_t t[3][256];       /* the PSN bytes' contributions: [0] bits 23-16, [1] 15-8, [2] 7-0 */
} dp_tpl;

typedef struct {              /* DCQCN reaction point (see DcqcnRP) */
    double line_bps, g, alpha_timer_s, rate_timer_s, rai, rhai, min_bps;
    double rc, rt, alpha, lowest;
    double next_alpha, next_rate, hold_s;
    int64_t byte_counter, F, t_steps, bc_steps, bytes_since;
    int64_t cnps, cuts, fast, additive, hyper;
    /* rules 1: HPCC ns-3's DCQCN (see dp_rp_ns3); 0: the paper's (above) */
    int32_t rules, first, a_cnp, d_cnp;
    double dec_interval, next_dec;
    int64_t stage;
} dp_rp;

typedef struct {              /* one sender NIC's record of the PFC agent's PAUSE board
                               * (railab.testbed.pfc.NicPauseBoard, NIC_PAUSE_RECORD bytes) */
    double t_resume;          /* monotonic time of its last RESUME (s) */
    uint8_t paused;           /* 1 while PAUSEd */
    uint8_t pad[7];
} dp_pause;

typedef struct {
    /* configuration, written by Python before dp_run */
    int32_t tx_fd, cnp_fd, ntpl, ppm;
    int32_t cc, pad0;
    int64_t goal;             /* packets to send; < 0: for the whole run */
    double start_t, gap_s;    /* absolute start (monotonic s); idle time after each message */
    uint32_t start_psn, dqpn, sqpn, cnp_len;
    dp_tpl *tpl;              /* ntpl x 4 templates, index port * 4 + op */
    uint8_t *cnp_frame;
    double line_bps;          /* the rate of a QP without DCQCN */
    /* state, written by dp_run */
    dp_rp rp;
    double next_t, t_last_rx, last_cnp;
    int64_t sent, sent_bytes, rx, rx_bytes, ooo, max_psn_dist, ce, cnp_sent, cnp_rx, bp;
    int64_t deficit_bytes, max_idx, sends, frame_bits;
    int32_t active, failed, err, ttl;
    double late_s;            /* sending time the host took from this QP (s): debts dropped
                               * plus how late its last packet left against its schedule */
    int32_t owner, pad1;      /* the worker thread that sends this QP */
    int64_t cnp_applied;      /* CNPs its reaction point has taken (cnp_rx: arrived) */
    /* RC transport (IBTA 9.7; nic 0: none, every packet sent once, as before) */
    int32_t nic;              /* 0 none, 1 go-back-N, 2 out-of-order placement + selective repeat */
    int32_t nak_out;          /* receiver: a NAK for the current gap is outstanding */
    dp_tpl *ack_tpl;          /* receiver -> sender: [0] ACK, [1] NAK (PSN sequence error) */
    int64_t nxt, hi, una;     /* sender: next index to send, highest sent + 1, oldest unacked */
    int64_t retx, retx_bytes, acks_rx, naks_rx, timeouts;
    int64_t ack_hi;           /* acked index + 1, as ACKs arrive (any worker; owner takes it) */
    int64_t nak_seq, nak_idx, nak_applied;   /* the latest NAK, handed to the owner */
    int64_t rtx_one;          /* ooo: one packet to resend (-1: none) */
    double last_ack_t;        /* sender: last progress of una (or first send) */
    int64_t epsn, acks_tx, naks_tx, dup_rx, beyond;   /* receiver: next expected index ... */
    int64_t ack_pending;      /* receiver: packets since its last ACK */
    double t_done;            /* receiver: when every packet of the flow had arrived */
    uint64_t ooo_map[64];     /* ooo: indices epsn+1 .. epsn+4096 already placed */
    int64_t rec_hi;           /* ooo sender: after a timeout, recovery runs until una reaches
                               * this (hi at the timeout); 0: not recovering */
    /* CNP transit: the NP's send time of each CNP (a ring of CNP_RING), paired in order with
     * the CNPs the RP reads: from the NP's send() to the RP's read, through the fabric's
     * control class and both sockets (s) */
    double cnp_ts[64];
    int64_t cnp_w, cnp_r, cnp_lat_n;
    double cnp_lat_sum, cnp_lat_max;
    /* PFC at the sender NIC: its NIC's record of the switch agent's PAUSE board (NULL: none).
     * While paused the QP sends nothing and banks no credit; it goes on at its rate from the
     * RESUME's time: a NIC's scheduler skips a paused priority and resumes each QP at its rate
     * (HPCC ns-3 qbb-net-device.cc RdmaEgressQueue::GetNextQindex, rdma-hw.cc UpdateNextAvail) */
    const volatile dp_pause *pause;
    double held_since;        /* since when the board has held it (0: not held) */
    double pfc_held_s;        /* time the board held it, closed holds (s) */
    int64_t pfc_holds;        /* PAUSEs that held it */
} dp_qp;

#define CNP_RING 64

typedef struct {
    dp_qp *qps;
    int32_t nqp, nrx;
    int32_t *rx_fds;
    double end_t;             /* stop sending at this time; 0: when every byte flow is done */
    double deadline;          /* hard limit (monotonic s) */
    double cnp_interval;      /* NP: seconds between two CNPs of one QP, at least */
    double jitter;            /* each gap times a uniform factor in 1 +- jitter */
    double max_lag;           /* a QP this late drops its debt (counted) instead of bursting */
    double drain_idle, drain_max;
    int32_t catch_up;         /* most packets a QP sends in one turn */
    volatile int32_t stop;    /* set by Python: stop sending, drain */
    uint64_t rng;
    /* results */
    double t_end;             /* when sending stopped */
    int64_t loops, waits, rx_frames, rx_calls, tx_calls;
    int32_t fatal_errno, fatal_qp;
    double cpu_s;             /* CPU time of the worker threads (s) */
    void *priv;               /* the QPN maps (dp_prepare .. dp_release) */
    int32_t nthreads;         /* worker threads (<= 1: the calling thread alone) */
    int32_t live;             /* QPs still sending (internal) */
    double rto;               /* RC: retransmission timeout (s) */
    int32_t ack_every;        /* RC: the responder ACKs every this many packets (and on ack req) */
    int32_t ooo_nak_after;    /* ooo: a hole is NAKed once this many later packets arrived */
    double t0;                /* the run's start (monotonic s): Python's plan; dp_run moves it,
                               * and every QP's schedule with it, to when the workers start */
} dp_ctx;

/* what spawning the workers takes, at most, after start_now (s) */
#define START_MARGIN_S 0.002

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double urand(uint64_t *s)  /* xorshift64*, uniform in [0, 1) */
{
    uint64_t x = *s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return (double)((x * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- DCQCN reaction point -------------------------------------------------------------- */
void dp_rp_init(dp_rp *r, double line_bps, double g, double alpha_timer_s, double rate_timer_s,
                int64_t byte_counter, int64_t F, double rai, double rhai, double min_bps,
                double initial_alpha, double now)
{
    memset(r, 0, sizeof(*r));
    r->line_bps = line_bps; r->g = g;
    r->alpha_timer_s = alpha_timer_s; r->rate_timer_s = rate_timer_s;
    r->byte_counter = byte_counter; r->F = F;
    r->rai = rai; r->rhai = rhai;
    r->min_bps = min_bps < line_bps ? min_bps : line_bps;
    r->rc = r->rt = r->lowest = line_bps;
    r->alpha = initial_alpha;
    r->next_alpha = now + alpha_timer_s;
    r->next_rate = now + rate_timer_s;
}

/* Switch an initialised RP to ns-3's rules (rules 1): its cuts come from a periodic check every
 * dec_interval s (ns-3's RATE_DECREASE_INTERVAL) that starts one interval after the first CNP;
 * no timer runs before that CNP. */
void dp_rp_ns3(dp_rp *r, double dec_interval)
{
    r->rules = 1;
    r->first = 1;
    r->a_cnp = r->d_cnp = 0;
    r->dec_interval = dec_interval;
    r->alpha = 1.0;
    r->next_alpha = r->next_rate = r->next_dec = __builtin_inf();   /* no timer before a CNP */
    r->stage = 0;
}

static void rp_on_cnp_ns3(dp_rp *r, double now)
{
    r->cnps++;
    r->a_cnp = r->d_cnp = 1;
    if (r->first) {
        r->first = 0;
        r->alpha = 1.0;
        r->a_cnp = 0;
        r->next_alpha = now + r->alpha_timer_s;
        r->next_dec = now + r->dec_interval + 1e-9;
    }
}

void dp_rp_on_cnp(dp_rp *r, double now)
{
    if (r->rules == 1) {
        rp_on_cnp_ns3(r, now);
        return;
    }
    r->cnps++;
    r->cuts++;
    r->rt = r->rc;
    double rc = r->rc * (1.0 - r->alpha / 2.0);
    r->rc = rc > r->min_bps ? rc : r->min_bps;
    if (r->rc < r->lowest) r->lowest = r->rc;
    r->alpha = (1.0 - r->g) * r->alpha + r->g;
    r->t_steps = r->bc_steps = 0;
    r->bytes_since = 0;
    r->next_alpha = now + r->alpha_timer_s;
    r->next_rate = now + r->rate_timer_s;
}

static void rp_increase(dp_rp *r)
{
    int64_t hi = r->t_steps > r->bc_steps ? r->t_steps : r->bc_steps;
    int64_t lo = r->t_steps < r->bc_steps ? r->t_steps : r->bc_steps;
    if (hi <= r->F) {
        r->fast++;
    } else if (lo > r->F) {
        r->hyper++;
        double rt = r->rt + (double)(lo - r->F) * r->rhai;
        r->rt = rt < r->line_bps ? rt : r->line_bps;
    } else {
        r->additive++;
        double rt = r->rt + r->rai;
        r->rt = rt < r->line_bps ? rt : r->line_bps;
    }
    double rc = (r->rt + r->rc) / 2.0;
    r->rc = rc < r->line_bps ? rc : r->line_bps;
}

void dp_rp_on_sent(dp_rp *r, int64_t nbytes)
{
    if (r->rules == 1) return;   /* ns-3's DCQCN has no byte counter */
    r->bytes_since += nbytes;
    while (r->bytes_since >= r->byte_counter) {
        r->bytes_since -= r->byte_counter;
        r->bc_steps++;
        rp_increase(r);
    }
}

void dp_rp_hold(dp_rp *r, double seconds)
{
    r->next_alpha += seconds;
    r->next_rate += seconds;
    r->next_dec += seconds;
    r->hold_s += seconds;
}

static void rp_tick_ns3(dp_rp *r, double now)
{
    for (;;) {
        double nxt = r->next_alpha;
        if (r->next_dec < nxt) nxt = r->next_dec;
        if (r->next_rate < nxt) nxt = r->next_rate;
        if (nxt > now) return;
        if (nxt == r->next_alpha) {
            r->alpha = (1.0 - r->g) * r->alpha + (r->a_cnp ? r->g : 0.0);
            r->a_cnp = 0;
            r->next_alpha += r->alpha_timer_s;
        } else if (nxt == r->next_dec) {
            r->next_dec += r->dec_interval;
            if (r->d_cnp) {
                r->rt = r->rc;
                double rc = r->rc * (1.0 - r->alpha / 2.0);
                r->rc = rc > r->min_bps ? rc : r->min_bps;
                if (r->rc < r->lowest) r->lowest = r->rc;
                r->cuts++;
                r->stage = 0;
                r->d_cnp = 0;
                r->next_rate = nxt + r->rate_timer_s;
            }
        } else {
            r->next_rate += r->rate_timer_s;
            if (r->stage < r->F) {
                r->fast++;
            } else if (r->stage == r->F) {
                r->additive++;
                double rt = r->rt + r->rai;
                r->rt = rt < r->line_bps ? rt : r->line_bps;
            } else {
                r->hyper++;
                double rt = r->rt + r->rhai;
                r->rt = rt < r->line_bps ? rt : r->line_bps;
            }
            r->rc = (r->rc + r->rt) / 2.0;
            r->stage++;
        }
    }
}

void dp_rp_tick(dp_rp *r, double now)
{
    if (r->rules == 1) {
        rp_tick_ns3(r, now);
        return;
    }
    while (now >= r->next_alpha) {
        r->alpha *= 1.0 - r->g;
        r->next_alpha += r->alpha_timer_s;
    }
    while (now >= r->next_rate) {
        r->t_steps++;
        rp_increase(r);
        r->next_rate += r->rate_timer_s;
    }
}

/* ---- frames ---------------------------------------------------------------------------- */
uint32_t dp_icrc(const dp_tpl *t, uint32_t psn, int ackreq)
{
    return t->c0 ^ t->t[0][(psn >> 16) & 0xFF] ^ t->t[1][(psn >> 8) & 0xFF] ^ t->t[2][psn & 0xFF]
        ^ (ackreq ? t->ta : 0);
}

/* patch PSN, ack request and ICRC into the template's own buffer; returns it */
uint8_t *dp_frame(dp_tpl *t, uint32_t psn, int ackreq)
{
    uint8_t *b = t->frame;
    uint32_t c = dp_icrc(t, psn, ackreq);
    b[BTH_OFF + 8] = ackreq ? 0x80 : 0;
    b[BTH_OFF + 9] = (psn >> 16) & 0xFF;
    b[BTH_OFF + 10] = (psn >> 8) & 0xFF;
    b[BTH_OFF + 11] = psn & 0xFF;
    uint8_t *e = b + t->len - 4;
    e[0] = c & 0xFF; e[1] = (c >> 8) & 0xFF; e[2] = (c >> 16) & 0xFF; e[3] = c >> 24;
    return b;
}

/* ---- QP lookup: open addressing on the QPN ------------------------------------------- */
typedef struct { uint32_t key; int32_t idx; } slot;
typedef struct { slot *s; uint32_t mask; } qmap;

static int qmap_init(qmap *m, int n)
{
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 4) cap <<= 1;
    m->s = calloc(cap, sizeof(slot));
    if (!m->s) return -1;
    m->mask = cap - 1;
    for (uint32_t i = 0; i < cap; i++) m->s[i].idx = -1;
    return 0;
}

static void qmap_put(qmap *m, uint32_t key, int32_t idx)
{
    uint32_t h = (key * 2654435761u) & m->mask;
    while (m->s[h].idx >= 0 && m->s[h].key != key) h = (h + 1) & m->mask;
    m->s[h].key = key;
    m->s[h].idx = idx;
}

static inline int32_t qmap_get(const qmap *m, uint32_t key)
{
    uint32_t h = (key * 2654435761u) & m->mask;
    while (m->s[h].idx >= 0) {
        if (m->s[h].key == key) return m->s[h].idx;
        h = (h + 1) & m->mask;
    }
    return -1;
}

/* ---- receive ---------------------------------------------------------------------------- */
typedef struct {
    struct mmsghdr msg[RX_BATCH];
    struct iovec iov[RX_BATCH];
    struct sockaddr_ll addr[RX_BATCH];
    uint8_t buf[RX_BATCH][RX_SNAP];
} rxbatch;

typedef struct { qmap bydq, bysq; } maps;

typedef struct {              /* one worker thread: its QPs, receive sockets and counters */
    dp_ctx *c;
    const maps *m;
    int id;
    int ep;
    rxbatch *rb;
    pthread_t th;
    double cpu;
    uint64_t rng;             /* this worker's pacing jitter */
    double busy_since;        /* when it last waited */
    int64_t loops, waits, rx_frames, rx_calls, tx_calls;
} worker;

static inline void go_inactive(dp_ctx *c, dp_qp *q)
{
    if (q->active) {
        q->active = 0;
        __atomic_fetch_sub(&c->live, 1, __ATOMIC_RELAXED);
    }
}

/* a CNP arrived for QP q: its transit from the NP's send (the oldest unpaired send time; a
 * ring overrun, more than CNP_RING CNPs in flight, skips to the newest) */
static inline void cnp_transit(dp_qp *q, double now)
{
    int64_t w = __atomic_load_n(&q->cnp_w, __ATOMIC_ACQUIRE);
    if (q->cnp_r >= w) return;                 /* none sent that is not paired: not ours */
    if (w - q->cnp_r > CNP_RING) q->cnp_r = w - 1;
    double lat = now - q->cnp_ts[q->cnp_r % CNP_RING];
    q->cnp_r++;
    if (lat < 0) lat = 0;
    q->cnp_lat_n++;
    q->cnp_lat_sum += lat;
    if (lat > q->cnp_lat_max) q->cnp_lat_max = lat;
}

/* a CNP for QP q: counted where it arrives; the owner's reaction point takes it (at once when
 * the receiving thread is the owner, else on the owner's next loop turn, microseconds later) */
static inline void take_cnps(dp_qp *q, double now)
{
    int64_t n = __atomic_load_n(&q->cnp_rx, __ATOMIC_ACQUIRE);
    while (q->cnp_applied < n) {
        q->cnp_applied++;
        if (q->cc) dp_rp_on_cnp(&q->rp, now);
    }
}

/* the responder sends an ACK (syndrome 0x1F) or a NAK (0x60, PSN sequence error) for its QP */
static void ack_send(dp_qp *q, int nak, int64_t idx)
{
    dp_tpl *t = &q->ack_tpl[nak ? 1 : 0];
    uint8_t *f = dp_frame(t, (q->start_psn + (uint32_t)idx) & MASK24, 0);
    if (send(q->cnp_fd, f, t->len, MSG_DONTWAIT) >= 0) {
        if (nak) q->naks_tx++; else q->acks_tx++;
    }
}

static inline int ooo_has(const dp_qp *q, int64_t idx)
{
    int64_t d = idx - q->epsn - 1;
    return d >= 0 && d < OOO_WINDOW && (q->ooo_map[d >> 6] >> (d & 63)) & 1;
}

/* move the placed-window bitmap on by one index (epsn advanced by one) */
static void ooo_shift(dp_qp *q)
{
    for (int k = 0; k < 63; k++) q->ooo_map[k] = (q->ooo_map[k] >> 1) | (q->ooo_map[k + 1] << 63);
    q->ooo_map[63] >>= 1;
}

/* RC responder (IBTA 9.7.5: PSN checks): in order, the packet is accepted and acknowledged
 * (coalesced: every ack_every packets, on an ack request, at the flow's last packet); below the
 * expected PSN it is a duplicate; above it, go-back-N drops it and NAKs the expected PSN once
 * per gap, while out-of-order placement keeps it and NAKs a hole only once ooo_nak_after later
 * packets have arrived (reordering shorter than that costs nothing) */
static void responder(dp_ctx *c, dp_qp *q, int64_t idx, int ackreq, double now)
{
    if (idx < q->epsn || ooo_has(q, idx)) {
        q->dup_rx++;
        if (ackreq) ack_send(q, 0, q->epsn - 1);
        return;
    }
    if (idx > q->epsn) {
        if (q->nic == 2 && idx - q->epsn - 1 < OOO_WINDOW) {
            int64_t d = idx - q->epsn - 1;
            q->ooo_map[d >> 6] |= 1ULL << (d & 63);
            q->beyond++;
            if (!q->nak_out && q->beyond >= c->ooo_nak_after) { ack_send(q, 1, q->epsn); q->nak_out = 1; }
        } else if (!q->nak_out) {
            ack_send(q, 1, q->epsn);
            q->nak_out = 1;
        }
        return;
    }
    q->epsn++;                /* in order */
    q->ack_pending++;
    if (q->nic == 2) {        /* placed packets right after it are in order now too */
        for (;;) {
            int placed = q->ooo_map[0] & 1;
            ooo_shift(q);
            if (!placed) break;
            q->epsn++;
            q->ack_pending++;
        }
        q->beyond = 0;
        for (int k = 0; k < 64; k++) q->beyond += __builtin_popcountll(q->ooo_map[k]);
        /* in a NAK episode (a resent packet just filled a hole) with packets still placed past
         * the next hole: that hole is older than the resend, so lost, not late: NAK it now (a
         * lost burst is recovered one hole per round trip, not one per timeout) */
        if (q->nak_out && q->beyond > 0) {
            ack_send(q, 1, q->epsn);
            q->ack_pending = 0;
            return;
        }
    }
    q->nak_out = 0;
    int last = q->goal >= 0 && q->epsn >= q->goal;
    if (last && q->t_done == 0) q->t_done = now;
    if (ackreq || last || q->ack_pending >= c->ack_every) {
        ack_send(q, 0, q->epsn - 1);
        q->ack_pending = 0;
    }
}

static void rx_frame(dp_ctx *c, const maps *m, int self, const uint8_t *b, uint32_t n,
                     double now)
{
    if (n < 14 + 20 + 8 + 12 || b[23] != 17) return;
    uint32_t o = 14 + (b[14] & 0x0F) * 4 + 8;
    if (o + 12 > RX_SNAP) return;
    uint32_t dqpn = ((uint32_t)b[o + 5] << 16) | ((uint32_t)b[o + 6] << 8) | b[o + 7];
    if (b[o] == 0x81) {       /* CNP: to the sender's QP */
        int32_t i = qmap_get(&m->bysq, dqpn);
        if (i < 0) return;
        dp_qp *q = &c->qps[i];
        cnp_transit(q, now);
        __atomic_fetch_add(&q->cnp_rx, 1, __ATOMIC_RELEASE);
        if (q->owner == self) take_cnps(q, now);
        return;
    }
    if (b[o] == 0x11) {       /* ACKNOWLEDGE (AETH after the BTH): to the sender's QP */
        int32_t i = qmap_get(&m->bysq, dqpn);
        if (i < 0 || o + 16 > RX_SNAP) return;
        dp_qp *q = &c->qps[i];
        uint32_t psn = ((uint32_t)b[o + 9] << 16) | ((uint32_t)b[o + 10] << 8) | b[o + 11];
        int64_t idx = (int64_t)((psn - q->start_psn) & MASK24);
        if ((b[o + 12] & 0x60) == 0x60) {   /* NAK; code 0: PSN sequence error, PSN = expected */
            __atomic_store_n(&q->nak_idx, idx, __ATOMIC_RELAXED);
            __atomic_fetch_add(&q->nak_seq, 1, __ATOMIC_RELEASE);
            __atomic_fetch_add(&q->naks_rx, 1, __ATOMIC_RELAXED);
        } else {                            /* ACK: every PSN up to this one arrived */
            int64_t cur = __atomic_load_n(&q->ack_hi, __ATOMIC_RELAXED);
            while (idx + 1 > cur &&
                   !__atomic_compare_exchange_n(&q->ack_hi, &cur, idx + 1, 0, __ATOMIC_RELEASE,
                                                __ATOMIC_RELAXED)) {}
            __atomic_fetch_add(&q->acks_rx, 1, __ATOMIC_RELAXED);
        }
        return;
    }
    int32_t i = qmap_get(&m->bydq, dqpn);
    if (i < 0) return;
    dp_qp *q = &c->qps[i];
    uint32_t psn = ((uint32_t)b[o + 9] << 16) | ((uint32_t)b[o + 10] << 8) | b[o + 11];
    int64_t idx = (int64_t)((psn - q->start_psn) & MASK24);
    q->rx++;
    q->rx_bytes += n;
    q->t_last_rx = now;
    q->ttl = b[22];
    if (idx < q->max_idx) {
        q->ooo++;
        if (q->max_idx - idx > q->max_psn_dist) q->max_psn_dist = q->max_idx - idx;
    } else {
        q->max_idx = idx;
    }
    if ((b[15] & 3) == 3) {   /* CE: the NP paces CNPs per QP */
        q->ce++;
        if (now - q->last_cnp >= c->cnp_interval) {
            q->last_cnp = now;
            /* its send time is in the ring before the CNP exists: another thread may read
             * it at the sender before send() returns here */
            int64_t w = __atomic_load_n(&q->cnp_w, __ATOMIC_RELAXED);
            q->cnp_ts[w % CNP_RING] = now;
            __atomic_store_n(&q->cnp_w, w + 1, __ATOMIC_RELEASE);
            if (send(q->cnp_fd, q->cnp_frame, q->cnp_len, MSG_DONTWAIT) >= 0)
                q->cnp_sent++;
            else    /* none sent: no CNP will come to pair with it */
                __atomic_store_n(&q->cnp_w, w, __ATOMIC_RELEASE);
        }
    }
    if (q->nic) responder(c, q, idx, b[o + 8] & 0x80, now);
}

static int64_t rx_drain(worker *w, int fd)
{
    rxbatch *rb = w->rb;
    int64_t got = 0;
    for (;;) {
        for (int k = 0; k < RX_BATCH; k++) {
            rb->iov[k].iov_base = rb->buf[k];
            rb->iov[k].iov_len = RX_SNAP;
            memset(&rb->msg[k].msg_hdr, 0, sizeof(struct msghdr));
            rb->msg[k].msg_hdr.msg_iov = &rb->iov[k];
            rb->msg[k].msg_hdr.msg_iovlen = 1;
            rb->msg[k].msg_hdr.msg_name = &rb->addr[k];
            rb->msg[k].msg_hdr.msg_namelen = sizeof(struct sockaddr_ll);
        }
        int n = recvmmsg(fd, rb->msg, RX_BATCH, MSG_DONTWAIT | MSG_TRUNC, NULL);
        w->rx_calls++;
        if (n <= 0) break;
        double now = now_s();
        for (int k = 0; k < n; k++) {
            if (rb->addr[k].sll_pkttype == PACKET_OUTGOING) continue;
            rx_frame(w->c, w->m, w->id, rb->buf[k], rb->msg[k].msg_len, now);
            got++;
        }
        if (n < RX_BATCH) break;
    }
    w->rx_frames += got;
    return got;
}

static int64_t rx_poll(worker *w, double wait_s)
{
    struct epoll_event ev[64];
    struct timespec ts;
    if (wait_s < 0) wait_s = 0;
    ts.tv_sec = (time_t)wait_s;
    ts.tv_nsec = (long)((wait_s - (double)ts.tv_sec) * 1e9);
    int n = epoll_pwait2(w->ep, ev, 64, &ts, NULL);
    if (wait_s > 0) w->waits++;
    int64_t got = 0;
    for (int k = 0; k < n; k++) got += rx_drain(w, ev[k].data.fd);
    return got;
}

/* ---- send ------------------------------------------------------------------------------- */
static inline double qp_rate(const dp_qp *q) { return q->cc ? q->rp.rc : q->line_bps; }

/* RC requester (IBTA 9.7.4, 9.7.5.2): the ACKs and NAKs that arrived (any worker) taken by the
 * QP's owner: an ACK moves the oldest unacknowledged PSN on; a NAK (PSN sequence error, PSN =
 * the responder's expected one) acknowledges what precedes it and, go-back-N, resends from
 * there, or, selective repeat, resends that packet alone; no progress for rto resends
 * everything from the oldest unacknowledged packet on (a lost tail has no later packet to
 * reveal it) */
/* a resend was just scheduled: a QP that had sent every packet waits for the timeout
 * (next_t = last_ack_t + rto), so send it now; one still pacing its packets sends it in turn */
static inline void wake(dp_qp *q, double now)
{
    if (q->goal >= 0 && q->hi >= q->goal && q->next_t > now) q->next_t = now;
}

static void take_acks(dp_ctx *c, dp_qp *q, double now)
{
    int64_t a = __atomic_load_n(&q->ack_hi, __ATOMIC_ACQUIRE);
    int64_t una0 = q->una;
    if (a > q->una) { q->una = a; q->last_ack_t = now; }
    int64_t seq = __atomic_load_n(&q->nak_seq, __ATOMIC_ACQUIRE);
    if (seq != q->nak_applied) {
        q->nak_applied = seq;
        int64_t k = __atomic_load_n(&q->nak_idx, __ATOMIC_RELAXED);
        if (k > q->una) q->una = k;
        q->last_ack_t = now;
        if (q->nic == 1) { if (q->nxt > k) q->nxt = k; }
        else if (k < q->hi) q->rtx_one = k;
        wake(q, now);
    }
    if (q->nic == 2 && q->rec_hi) {
        if (q->una >= q->rec_hi) q->rec_hi = 0;                 /* recovered */
        else if (q->una > una0 && q->rtx_one < 0) {             /* partial ACK */
            q->rtx_one = q->una;
            wake(q, now);
        }
    }
    if (q->hi > q->una && now - q->last_ack_t > c->rto) {
        q->timeouts++;
        q->last_ack_t = now;
        /* IBTA 9.7.5.2: a timeout resends from the oldest unacknowledged packet: go-back-N
         * all of them; selective repeat that one, then (below) the next on every partial
         * acknowledgement until una passes what was outstanding at the timeout (NewReno's
         * rule, RFC 6582 3.2: a lost tail costs one timeout and a round trip a packet) */
        if (q->nic == 1) q->nxt = q->una;
        else { q->rtx_one = q->una; q->rec_hi = q->hi; }
        if (q->next_t > now) q->next_t = now;
    }
    if (q->goal >= 0 && q->una >= q->goal) go_inactive(c, q);
}

/* 0: go on; 1: this QP is done for now; -1: fatal (ctx->fatal_errno set) */
static int send_due(worker *w, dp_qp *q, int qi, double now)
{
    dp_ctx *c = w->c;
    int burst = 0;
    int ppm = q->ppm;
    if (q->pause) {
        if (q->pause->paused) {   /* PAUSEd: look again one frame time at the line rate on */
            if (q->held_since == 0.0) {
                q->held_since = now;
                q->pfc_holds++;
            }
            q->next_t = now + (double)q->frame_bits / q->line_bps;
            return 1;
        }
        if (q->held_since != 0.0) {   /* RESUMEd: on at its rate from the RESUME (written
                                       * before the flag cleared), however late this thread
                                       * saw it; nothing of the paused time is banked */
            double tr = q->pause->t_resume;
            double from = tr >= q->held_since && tr <= now ? tr : now;
            q->pfc_held_s += from - q->held_since;
            q->held_since = 0.0;
            q->next_t = from;
        }
    }
    while (q->next_t <= now && burst < c->catch_up) {
        int64_t i;
        if (q->nic) {
            if (q->goal >= 0 && q->una >= q->goal) {
                go_inactive(c, q);
                return 1;
            }
            i = q->rtx_one >= 0 ? q->rtx_one : q->nxt;
            if (q->goal >= 0 && i >= q->goal) {   /* all sent: wait for ACKs or the timeout */
                q->next_t = q->last_ack_t + c->rto;
                return 1;
            }
        } else {
            if (q->goal >= 0 && q->sent >= q->goal) {
                go_inactive(c, q);
                return 1;
            }
            i = q->sent;
        }
        int pos = (int)(i % ppm);
        int op;
        if (ppm == 1) op = OP_ONLY;
        else if (pos == 0) op = OP_FIRST;
        else if (pos == ppm - 1 || (q->goal >= 0 && i == q->goal - 1)) op = OP_LAST;
        else op = OP_MIDDLE;
        int fresh = !q->nic || i >= q->hi;   /* not a retransmission */
        if (fresh && q->goal >= 0 && i == q->goal - 1) q->late_s += now - q->next_t;
        dp_tpl *t = &q->tpl[(i % q->ntpl) * 4 + op];
        /* the AckReq bit: a message's last packet, and every resend (IBTA 9.7.5.1.2 lets a
         * requester ask on any packet): a resend into a hole must be acknowledged at once, or
         * coalescing (every ack_every packets) holds the ACK a lost tail's recovery waits on */
        int msg_end = op == OP_LAST || op == OP_ONLY;
        int ack = msg_end || !fresh;
        uint8_t *f = dp_frame(t, (q->start_psn + (uint32_t)i) & MASK24, ack);
        w->tx_calls++;
        if (send(q->tx_fd, f, t->len, MSG_DONTWAIT) < 0) {
            int e = errno;
            if (e == EAGAIN || e == ENOBUFS || e == EINTR) {   /* the NIC's queue is full */
                q->bp++;
                q->next_t = now + (double)q->frame_bits / qp_rate(q);
                return 1;
            }
            q->err = e;
            if (e == ENETDOWN || e == ENXIO || e == EMSGSIZE) {
                q->failed = 1;
                go_inactive(c, q);
                return 1;
            }
            c->fatal_errno = e;
            c->fatal_qp = qi;
            return -1;
        }
        q->sent++;
        q->sent_bytes += t->len;
        if (q->nic) {
            if (!fresh) {
                q->retx++;
                q->retx_bytes += t->len;
            } else {
                if (q->hi == 0) q->last_ack_t = now;   /* the timer runs from the first packet */
                q->hi = i + 1;
            }
            if (q->rtx_one == i) q->rtx_one = -1; else q->nxt = i + 1;
        }
        double rate = qp_rate(q);
        q->next_t += (double)t->len * 8.0 / rate * (1.0 + c->jitter * (2.0 * urand(&w->rng) - 1.0));
        if (q->cc) dp_rp_on_sent(&q->rp, t->len);
        burst++;
        if (q->gap_s > 0 && msg_end && fresh) {
            q->next_t += q->gap_s;
            return 0;
        }
    }
    /* the host stalled this QP: count the debt (not once it sent its last packet: that
     * packet's lateness is counted already, and nothing of it is left to send) */
    int64_t done_to = q->nic ? q->nxt : q->sent;
    if (q->next_t < now - c->max_lag && !(q->goal >= 0 && done_to >= q->goal)) {
        double lost = now - q->next_t;
        q->deficit_bytes += (int64_t)(lost * qp_rate(q) / 8.0);
        q->late_s += lost;
        if (q->cc) dp_rp_hold(&q->rp, lost);
        q->next_t = now;
    }
    return 0;
}

int dp_abi(void) { return DP_ABI; }
size_t dp_sizeof_qp(void) { return sizeof(dp_qp); }
size_t dp_sizeof_ctx(void) { return sizeof(dp_ctx); }
size_t dp_sizeof_tpl(void) { return sizeof(dp_tpl); }
size_t dp_sizeof_rp(void) { return sizeof(dp_rp); }

/* Index the QPs by QPN (data packets by destination QP, CNPs by the sender's QP). 0 or -ENOMEM. */
int dp_prepare(dp_ctx *c)
{
    if (c->priv) return 0;
    maps *m = calloc(1, sizeof(maps));
    if (!m) return -ENOMEM;
    if (qmap_init(&m->bydq, c->nqp) || qmap_init(&m->bysq, c->nqp)) {
        free(m->bydq.s); free(m->bysq.s); free(m);
        return -ENOMEM;
    }
    for (int i = 0; i < c->nqp; i++) {
        qmap_put(&m->bydq, c->qps[i].dqpn, i);
        qmap_put(&m->bysq, c->qps[i].sqpn, i);
    }
    c->priv = m;
    return 0;
}

void dp_release(dp_ctx *c)
{
    maps *m = c->priv;
    if (!m) return;
    free(m->bydq.s); free(m->bysq.s); free(m);
    c->priv = NULL;
}

/* One received frame, as the receive loop handles it (for tests: no socket needed; a CNP the
 * NP earns is sent on the QP's cnp_fd, a CNP's cut is taken at once). 0 or -ENOMEM. */
int dp_rx(dp_ctx *c, const uint8_t *frame, uint32_t n, double now)
{
    int r = dp_prepare(c);
    if (r) return r;
    uint8_t b[RX_SNAP];
    uint32_t k = n < RX_SNAP ? n : RX_SNAP;
    memcpy(b, frame, k);
    rx_frame(c, c->priv, 0, b, n, now);   /* as worker 0, the owner of QPs set up by a test */
    return 0;
}

/* The requester's side of one QP at ``now`` (for tests: what a worker does every turn). */
void dp_take_acks(dp_ctx *c, int32_t i, double now)
{
    if (i >= 0 && i < c->nqp) take_acks(c, &c->qps[i], now);
}

static int all_failed(const dp_ctx *c)
{
    for (int i = 0; i < c->nqp; i++) if (!c->qps[i].failed) return 0;
    return 1;
}

static void *work(void *arg)
{
    worker *w = arg;
    dp_ctx *c = w->c;
    char name[16];
    snprintf(name, sizeof name, "railab-dp%d", w->id);
    prctl(PR_SET_NAME, name, 0, 0, 0);   /* the thread's name in ps, top and perf */
    w->busy_since = now_s();
    for (;;) {
        double now = now_s();
        if (c->stop || now >= c->deadline || (c->end_t > 0 && now >= c->end_t) || c->fatal_errno)
            break;
        if (__atomic_load_n(&c->live, __ATOMIC_RELAXED) <= 0 && (c->end_t <= 0 || all_failed(c)))
            break;                               /* every byte flow done, or every QP failed */
        double next = now + 0.001;
        for (int i = 0; i < c->nqp; i++) {
            dp_qp *q = &c->qps[i];
            if (q->owner != w->id || !q->active) continue;
            if (q->cc) {
                take_cnps(q, now);
                dp_rp_tick(&q->rp, now);
            }
            if (q->nic) {
                take_acks(c, q, now);
                if (!q->active) continue;
            }
            if (q->next_t <= now && send_due(w, q, i, now) < 0) break;
            if (q->active && q->next_t < next) next = q->next_t;
        }
        w->loops++;
        double t = now_s();
        double wait = next - t > 0 ? next - t : 0;
        /* a worker behind its schedule never sleeps; at real-time priority on every core it
         * would starve the rest of the lab (FRR, the kernel's softirq thread): every
         * BUSY_MAX_S without a wait it waits BUSY_REST_S all the same */
        if (wait > 0) {
            w->busy_since = t;
        } else if (t - w->busy_since > BUSY_MAX_S) {   /* a real sleep: packets keep arriving */
            struct timespec rest = { 0, (long)(BUSY_REST_S * 1e9) };
            nanosleep(&rest, NULL);
            w->busy_since = now_s();
        }
        rx_poll(w, wait);
    }
    double zero = 0.0, t_end = now_s();
    __atomic_compare_exchange(&c->t_end, &zero, &t_end, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    /* drain: while packets still arrive at this worker's receivers (a paused or deep queue
     * empties at the port rate), at most drain_max; stop early once every packet arrived, or
     * drain_idle after the last one */
    double hard = c->t_end + c->drain_max, last = now_s();
    for (;;) {
        double now = now_s();
        if (now >= hard || now - last >= c->drain_idle) break;
        if (rx_poll(w, 0.02) > 0) last = now_s();
        int all = 1;
        for (int i = 0; i < c->nqp; i++)
            if (c->qps[i].rx < c->qps[i].sent) { all = 0; break; }
        if (all) break;
    }
    struct timespec cpu;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    w->cpu = (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9;
    return NULL;
}

/* Start workers 1..T-1 running fn, worker k pinned to CPU k when there are enough CPUs; returns
 * the highest index started (a failed start sets *err and ctx->stop). */
static int spawn(dp_ctx *c, worker *w, int T, void *(*fn)(void *), int *err)
{
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), started = 0;
    for (int k = 1; k < T; k++) {
        if (pthread_create(&w[k].th, NULL, fn, &w[k])) { *err = -EAGAIN; c->stop = 1; break; }
        started = k;
        if (T <= ncpu) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(k, &set);
            pthread_setaffinity_np(w[k].th, sizeof set, &set);
        }
    }
    return started;
}

/* ---- the blaster: the kernel's limit ----------------------------------------------------- */
static void *blast(void *arg)
{
    worker *w = arg;
    dp_ctx *c = w->c;
    char name[16];
    snprintf(name, sizeof name, "railab-bl%d", w->id);
    prctl(PR_SET_NAME, name, 0, 0, 0);
    while (!c->stop && now_s() < c->end_t) {
        for (int i = 0; i < c->nqp; i++) {
            dp_qp *q = &c->qps[i];
            if (q->owner != w->id || !q->active) continue;
            dp_tpl *t = &q->tpl[OP_MIDDLE];
            uint8_t *f = dp_frame(t, (q->start_psn + (uint32_t)q->sent) & MASK24, 0);
            w->tx_calls++;
            if (send(q->tx_fd, f, t->len, MSG_DONTWAIT) < 0) { q->bp++; continue; }
            q->sent++;
            q->sent_bytes += t->len;
        }
        w->loops++;
    }
    struct timespec cpu;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    w->cpu = (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9;
    return NULL;
}

/* Send every active QP's MIDDLE frame round robin, unpaced, no DCQCN, nothing received, until
 * ctx->end_t, on ctx->nthreads workers (QPs by NIC socket, as dp_run): how many packets per
 * second the lab's kernel path takes at most (what arrives is counted on the ports). 0 or
 * -errno. */
int dp_blast(dp_ctx *c)
{
    int T = c->nthreads < 1 ? 1 : (c->nthreads > MAX_THREADS ? MAX_THREADS : c->nthreads);
    worker w[MAX_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < c->nqp; i++)
        c->qps[i].owner = T > 1 ? (int32_t)((uint32_t)c->qps[i].tx_fd % (uint32_t)T) : 0;
    int err = 0;
    for (int k = 0; k < T; k++) { w[k].c = c; w[k].id = k; }
    int started = spawn(c, w, T, blast, &err);
    blast(&w[0]);
    for (int k = 1; k <= started; k++) pthread_join(w[k].th, NULL);
    c->t_end = now_s();
    c->cpu_s = 0;
    for (int k = 0; k < T; k++) {
        c->loops += w[k].loops; c->tx_calls += w[k].tx_calls; c->cpu_s += w[k].cpu;
    }
    return err;
}

/* Run the load on ctx->nthreads workers (the calling thread is worker 0; QPs are owned by the
 * worker of their NIC socket, receive sockets spread over the workers, worker k pinned to CPU
 * k when there are enough). Returns 0, or -errno when it could not run (a fatal send error is
 * reported in ctx->fatal_errno / fatal_qp and ends sending). */
/* Start the run when the workers can start it: if setting up took past the planned start
 * (ctx->t0), every QP's schedule (start, next send, DCQCN timers) and a timed run's end move
 * on by that much, so no QP begins in debt. Measured: between Python's plan and the workers'
 * first turn 20-45 ms went by in a CLI process (load 12-20), and every QP of a 1 MiB
 * all-reduce at 50 Mb/s started that late: 15-24 % of its time, keeps_rate false. */
static void start_now(dp_ctx *c)
{
    double late = now_s() + START_MARGIN_S - c->t0;
    if (c->t0 <= 0 || late <= 0) return;
    for (int i = 0; i < c->nqp; i++) {
        dp_qp *q = &c->qps[i];
        q->start_t += late;
        q->next_t += late;
        q->rp.next_alpha += late;
        q->rp.next_rate += late;
    }
    if (c->end_t > 0) c->end_t += late;
    c->t0 += late;
}

int dp_run(dp_ctx *c)
{
    int r = dp_prepare(c);
    if (r) return r;
    start_now(c);
    int T = c->nthreads < 1 ? 1 : (c->nthreads > MAX_THREADS ? MAX_THREADS : c->nthreads);
    worker w[MAX_THREADS];
    memset(w, 0, sizeof w);
    c->live = 0;
    c->t_end = 0.0;
    if (!c->rng) c->rng = 0x9E3779B97F4A7C15ULL;
    if (c->ack_every < 1) c->ack_every = 1;
    if (c->ooo_nak_after < 1) c->ooo_nak_after = 1;
    for (int i = 0; i < c->nqp; i++) {
        dp_qp *q = &c->qps[i];
        q->owner = T > 1 ? (int32_t)((uint32_t)q->tx_fd % (uint32_t)T) : 0;
        q->rtx_one = -1;
        if (q->active) c->live++;
    }
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int err = 0, started = 0;
    for (int k = 0; k < T; k++) {
        w[k].c = c; w[k].m = c->priv; w[k].id = k;
        w[k].rng = c->rng ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(k + 1));
        if (!w[k].rng) w[k].rng = 1;
        w[k].rb = malloc(sizeof(rxbatch));
        w[k].ep = epoll_create1(EPOLL_CLOEXEC);
        if (!w[k].rb || w[k].ep < 0) { err = -ENOMEM; break; }
        for (int j = k; j < c->nrx; j += T) {
            struct epoll_event ev = { .events = EPOLLIN, .data.fd = c->rx_fds[j] };
            epoll_ctl(w[k].ep, EPOLL_CTL_ADD, c->rx_fds[j], &ev);
        }
    }
    if (!err) {
        started = spawn(c, w, T, work, &err);
        cpu_set_t before;
        int pinned = T > 1 && T <= ncpu && !pthread_getaffinity_np(pthread_self(), sizeof before, &before);
        if (pinned) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(0, &set);
            pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        }
        work(&w[0]);
        for (int k = 1; k <= started; k++) pthread_join(w[k].th, NULL);
        if (pinned) pthread_setaffinity_np(pthread_self(), sizeof before, &before);
    }
    c->cpu_s = 0;
    for (int k = 0; k < T; k++) {
        c->loops += w[k].loops; c->waits += w[k].waits; c->rx_frames += w[k].rx_frames;
        c->rx_calls += w[k].rx_calls; c->tx_calls += w[k].tx_calls; c->cpu_s += w[k].cpu;
        free(w[k].rb);
        if (w[k].ep > 0) close(w[k].ep);
    }
    for (int i = 0; i < c->nqp; i++) {
        take_cnps(&c->qps[i], c->t_end);
        if (c->qps[i].nic) {
            int64_t a = c->qps[i].ack_hi;
            if (a > c->qps[i].una) c->qps[i].una = a;
        }
    }
    dp_release(c);
    return err;
}
