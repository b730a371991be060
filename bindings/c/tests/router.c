/* The host's state through the C ABI: KV events feed the index, the ledger books and frees,
 * replica events arrive late and twice, one call routes; approximate mode follows its own
 * predictions; and every bad input gets its documented status. Prints "N passed, N failed". */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "libroute.h"
#include "check.h"


static libroute_worker worker(uint64_t id) {
  libroute_worker w;
  w.worker_id = id;
  w.dp_rank = 0;
  return w;
}

static libroute_router_config config(size_t prediction_slots) {
  libroute_router_config c;
  memset(&c, 0, sizeof c);
  c.block_slots = 1024;
  c.max_workers = 64;
  c.request_slots = 256;
  c.tombstones = 64;
  c.prediction_slots = prediction_slots;
  c.prediction_ttl = 1000;
  c.host_weight = 0.75;
  c.disk_weight = 0.25;
  return c;
}

static libroute_request request(uint64_t prompt) {
  libroute_request r;
  memset(&r, 0, sizeof r);
  r.prompt_tokens = prompt;
  r.block_size = 16;
  r.role = LIBROUTE_ROLE_AGGREGATED;
  r.track_prefill_tokens = 1;
  return r;
}

static libroute_router_counters counters(libroute_router *router) {
  libroute_router_counters c;
  memset(&c, 0, sizeof c);
  libroute_router_get_counters(router, &c);
  return c;
}

static void test_events_route_book_free(void) {
  libroute_router_config cfg = config(0);
  libroute_router *router = NULL;
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  uint64_t prompt[8] = {101, 102, 103, 104, 105, 106, 107, 108};
  libroute_kv_event events[2];
  libroute_row rows[4];
  libroute_request req = request(128);
  libroute_selection sel;
  uint64_t w;
  EXPECT_STATUS(libroute_router_new(&cfg, &router), LIBROUTE_STATUS_OK);
  libroute_policy_new_default(&policy);
  libroute_selector_new(16, 1, &selector);
  for (w = 1; w <= 4; w++) EXPECT_STATUS(libroute_router_add_worker(router, worker(w)), LIBROUTE_STATUS_OK);

  /* Worker 2 holds the whole prompt in device memory; worker 3 its first 4 blocks on the host. */
  memset(events, 0, sizeof events);
  events[0].kind = LIBROUTE_KV_KIND_STORED;
  events[0].worker = worker(2);
  events[0].tier = 0;
  events[0].hashes = prompt;
  events[0].hashes_len = 8;
  events[1].kind = LIBROUTE_KV_KIND_STORED;
  events[1].worker = worker(3);
  events[1].tier = 1;
  events[1].hashes = prompt;
  events[1].hashes_len = 4;
  EXPECT_STATUS(libroute_router_apply_kv_events(router, events, 2), LIBROUTE_STATUS_OK);
  CHECK(counters(router).blocks == 8, "8 blocks indexed");

  memset(rows, 0, sizeof rows);
  for (w = 0; w < 4; w++) rows[w].worker = worker(w + 1);
  EXPECT_STATUS(libroute_router_route(router, policy, selector, &req, prompt, 8, rows, 4, 77, 0, &sel), LIBROUTE_STATUS_OK);
  CHECK(sel.worker.worker_id == 2 && sel.cached_tokens == 128, "the worker holding the prompt wins, fully cached");
  CHECK(rows[2].host_blocks == 4 && rows[2].flags == (LIBROUTE_ROW_HAS_CACHE | LIBROUTE_ROW_HAS_LOAD), "rows were filled");
  CHECK(counters(router).active_requests == 1, "the request is booked");
  EXPECT_STATUS(libroute_router_route(router, policy, selector, &req, prompt, 8, rows, 4, 77, 0, &sel),
                LIBROUTE_STATUS_DUPLICATE_REQUEST);
  EXPECT_STATUS(libroute_router_prefill_complete(router, 77), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_prefill_complete(router, 77), LIBROUTE_STATUS_UNKNOWN_REQUEST);
  EXPECT_STATUS(libroute_router_free_request(router, 77), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_free_request(router, 77), LIBROUTE_STATUS_UNKNOWN_REQUEST);
  CHECK(counters(router).active_requests == 0, "nothing booked after the free");

  /* Booking directly, and a worker the ledger does not know. */
  EXPECT_STATUS(libroute_router_book(router, 5, worker(1), 100, 7), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_book(router, 5, worker(1), 100, 7), LIBROUTE_STATUS_DUPLICATE_REQUEST);
  EXPECT_STATUS(libroute_router_book(router, 6, worker(9), 100, 7), LIBROUTE_STATUS_UNKNOWN_WORKER);
  rows[0].worker = worker(9);
  EXPECT_STATUS(libroute_router_route(router, policy, selector, &req, prompt, 8, rows, 1, 78, 0, &sel),
                LIBROUTE_STATUS_UNKNOWN_WORKER);
  CHECK(counters(router).active_requests == 1, "a failed route books nothing");

  libroute_selector_free(selector);
  libroute_policy_free(policy);
  libroute_router_free(router);
}

/* A router saved to a snapshot and restored into another: the same state, the same next route,
 * the bookings made before the snapshot freed by the copy; a cut snapshot changes nothing. */
static void test_snapshot_restore(void) {
  libroute_router_config cfg = config(0);
  libroute_router *a = NULL, *b = NULL;
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  uint64_t prompt[4] = {201, 202, 203, 204};
  libroute_kv_event event;
  libroute_row rows[2];
  libroute_request req = request(64);
  libroute_selection sa, sb;
  uint8_t bytes[65536];
  size_t size = 0, written = 0;
  uint64_t w;
  EXPECT_STATUS(libroute_router_new(&cfg, &a), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_new(&cfg, &b), LIBROUTE_STATUS_OK);
  libroute_policy_new_default(&policy);
  libroute_selector_new(16, 1, &selector);
  for (w = 1; w <= 2; w++) EXPECT_STATUS(libroute_router_add_worker(a, worker(w)), LIBROUTE_STATUS_OK);
  memset(&event, 0, sizeof event);
  event.kind = LIBROUTE_KV_KIND_STORED;
  event.worker = worker(2);
  event.hashes = prompt;
  event.hashes_len = 4;
  EXPECT_STATUS(libroute_router_apply_kv_events(a, &event, 1), LIBROUTE_STATUS_OK);
  memset(rows, 0, sizeof rows);
  rows[0].worker = worker(1);
  rows[1].worker = worker(2);
  EXPECT_STATUS(libroute_router_route(a, policy, selector, &req, prompt, 4, rows, 2, 31, 0, &sa), LIBROUTE_STATUS_OK);

  EXPECT_STATUS(libroute_router_snapshot(a, NULL, 0, &size), LIBROUTE_STATUS_BUFFER_TOO_SMALL);
  CHECK(size > 0 && size <= sizeof bytes, "the size is given when there is no room");
  EXPECT_STATUS(libroute_router_snapshot(a, bytes, sizeof bytes, &written), LIBROUTE_STATUS_OK);
  CHECK(written == size, "the snapshot is as large as announced");

  EXPECT_STATUS(libroute_router_restore(b, bytes, size - 1), LIBROUTE_STATUS_INVALID_ARGUMENT);
  CHECK(counters(b).ledger_workers == 0, "a cut snapshot changes nothing");
  EXPECT_STATUS(libroute_router_restore(b, bytes, size), LIBROUTE_STATUS_OK);
  CHECK(counters(b).blocks == counters(a).blocks && counters(b).active_requests == 1 &&
            counters(b).ledger_workers == 2,
        "the copy holds the blocks, the booking and the workers");
  EXPECT_STATUS(libroute_router_route(a, policy, selector, &req, prompt, 4, rows, 2, 32, 0, &sa), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_route(b, policy, selector, &req, prompt, 4, rows, 2, 32, 0, &sb), LIBROUTE_STATUS_OK);
  CHECK(sa.worker.worker_id == sb.worker.worker_id && sa.cached_tokens == sb.cached_tokens,
        "the copy routes the next request as the original");
  EXPECT_STATUS(libroute_router_free_request(b, 31), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_snapshot(a, bytes, sizeof bytes, NULL), LIBROUTE_STATUS_NULL_ARGUMENT);

  libroute_selector_free(selector);
  libroute_policy_free(policy);
  libroute_router_free(a);
  libroute_router_free(b);
}

static void test_replica_events(void) {
  libroute_router_config cfg = config(0);
  libroute_router *router = NULL;
  libroute_ledger_event events[5];
  libroute_router_counters c;
  libroute_router_new(&cfg, &router);
  libroute_router_add_worker(router, worker(1));
  memset(events, 0, sizeof events);
  /* Freed before Booked (reordered), and a booking relayed twice. */
  events[0].kind = LIBROUTE_LEDGER_KIND_FREED;
  events[0].id = 10;
  events[1].kind = LIBROUTE_LEDGER_KIND_BOOKED;
  events[1].id = 10;
  events[1].worker = worker(1);
  events[1].prefill_tokens = 500;
  events[1].blocks = 9;
  events[2] = events[1];
  events[2].id = 11;
  events[3] = events[2];
  events[4].kind = LIBROUTE_LEDGER_KIND_BOOKED;
  events[4].id = 12;
  events[4].worker = worker(42);
  EXPECT_STATUS(libroute_router_apply_ledger_events(router, events, 5), LIBROUTE_STATUS_OK);
  c = counters(router);
  CHECK(c.active_requests == 1, "only request 11 is active");
  CHECK(c.late_ledger_events == 1 && c.duplicate_ledger_events == 1 && c.unknown_worker_ledger_events == 1,
        "late, duplicate and unknown-worker events are counted");
  EXPECT_STATUS(libroute_router_apply_ledger_events(router, events, 5), LIBROUTE_STATUS_OK);
  CHECK(counters(router).active_requests == 1, "applying everything again changes nothing");
  events[0].kind = 9;
  EXPECT_STATUS(libroute_router_apply_ledger_events(router, events, 5), LIBROUTE_STATUS_INVALID_ARGUMENT);
  libroute_router_free(router);
}

static void test_approximate_mode(void) {
  libroute_router_config cfg = config(256);
  libroute_router *router = NULL;
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  uint64_t prompt[4] = {7, 8, 9, 10};
  libroute_row rows[3];
  libroute_request req = request(64);
  libroute_selection first, again, late;
  uint64_t w;
  libroute_router_new(&cfg, &router);
  libroute_policy_new_default(&policy);
  libroute_selector_new(4, 3, &selector);
  memset(rows, 0, sizeof rows);
  for (w = 0; w < 3; w++) {
    libroute_router_add_worker(router, worker(w));
    rows[w].worker = worker(w);
  }
  EXPECT_STATUS(libroute_router_route(router, policy, selector, &req, prompt, 4, rows, 3, 1, 0, &first), LIBROUTE_STATUS_OK);
  libroute_router_free_request(router, 1);
  CHECK(counters(router).predictions == 4, "the choice is recorded as 4 predicted blocks");
  EXPECT_STATUS(libroute_router_route(router, policy, selector, &req, prompt, 4, rows, 3, 2, 500, &again), LIBROUTE_STATUS_OK);
  libroute_router_free_request(router, 2);
  CHECK(again.worker.worker_id == first.worker.worker_id && again.cached_tokens == 64, "the prediction is followed");
  EXPECT_STATUS(libroute_router_route(router, policy, selector, &req, prompt, 4, rows, 3, 3, 1500, &late), LIBROUTE_STATUS_OK);
  CHECK(late.cached_tokens == 0, "predictions expire after the TTL");
  libroute_selector_free(selector);
  libroute_policy_free(policy);
  libroute_router_free(router);
}

/* A self-calibrating host: timed bookings and prefill completions teach the router each worker's
 * speed; the ttft policy reads it from the rows libroute_router_route_at fills. */
static void test_timed_routing_calibrates_ttft(void) {
  libroute_router_config cfg = config(0);
  libroute_router *router = NULL;
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  const char *json = "{\"type\": \"ttft\"}";
  uint64_t prompt[2] = {5, 6};
  libroute_row rows[2];
  libroute_request req = request(1000);
  libroute_selection sel;
  uint64_t id;
  libroute_router_new(&cfg, &router);
  EXPECT_STATUS(libroute_policy_new(json, strlen(json), &policy), LIBROUTE_STATUS_OK);
  libroute_selector_new(4, 3, &selector);
  libroute_router_add_worker(router, worker(1));
  libroute_router_add_worker(router, worker(2));
  /* Worker 2 takes three times as long as worker 1 for the same prompt. */
  for (id = 0; id < 40; id++) {
    double slow = id % 2 ? 3.0 : 1.0, now = 1000.0 * (double)id;
    uint64_t tokens = 200 + 50 * id;
    EXPECT_STATUS(libroute_router_book_at(router, id, worker(1 + id % 2), tokens, 2, now), LIBROUTE_STATUS_OK);
    EXPECT_STATUS(libroute_router_prefill_complete_at(router, id, now + slow * (10 + 0.05 * (double)tokens)),
                  LIBROUTE_STATUS_OK);
    libroute_router_free_request(router, id);
  }
  memset(rows, 0, sizeof rows);
  rows[0].worker = worker(1);
  rows[1].worker = worker(2);
  EXPECT_STATUS(libroute_router_route_at(router, policy, selector, &req, prompt, 2, rows, 2, 100, 50000.0, &sel),
                LIBROUTE_STATUS_OK);
  CHECK(sel.worker.worker_id == 1, "the fast worker wins when both are idle");
  CHECK((rows[1].flags & LIBROUTE_ROW_HAS_SPEED) && rows[1].ms_per_prefill_token > 2 * rows[0].ms_per_prefill_token,
        "the rows carry the learned speeds");
  EXPECT_STATUS(libroute_router_prefill_complete_at(router, 100, -1.0), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_router_route_at(router, policy, selector, &req, prompt, 2, rows, 2, 101, NAN, &sel),
                LIBROUTE_STATUS_INVALID_ARGUMENT);
  CHECK(counters(router).active_requests == 1, "a bad time books nothing");
  EXPECT_STATUS(libroute_router_book_at(router, 102, worker(1), 1, 1, INFINITY), LIBROUTE_STATUS_INVALID_ARGUMENT);
  libroute_selector_free(selector);
  libroute_policy_free(policy);
  libroute_router_free(router);
}

static void test_bad_input(void) {
  libroute_router_config cfg = config(0);
  libroute_router *router = NULL;
  libroute_kv_event e;
  uint64_t w;
  EXPECT_STATUS(libroute_router_new(NULL, &router), LIBROUTE_STATUS_NULL_ARGUMENT);
  cfg.block_slots = 100;
  EXPECT_STATUS(libroute_router_new(&cfg, &router), LIBROUTE_STATUS_INVALID_ARGUMENT);
  cfg = config(0);
  cfg.max_workers = 100;
  EXPECT_STATUS(libroute_router_new(&cfg, &router), LIBROUTE_STATUS_INVALID_ARGUMENT);
  cfg = config(0);
  cfg.host_weight = 2.0;
  EXPECT_STATUS(libroute_router_new(&cfg, &router), LIBROUTE_STATUS_INVALID_ARGUMENT);
  cfg = config(0);
  cfg.block_slots = (size_t)1 << 30;
  EXPECT_STATUS(libroute_router_new(&cfg, &router), LIBROUTE_STATUS_CAPACITY_EXCEEDED);
  CHECK(router == NULL, "no router was written");
  cfg = config(0);
  EXPECT_STATUS(libroute_router_new(&cfg, &router), LIBROUTE_STATUS_OK);

  memset(&e, 0, sizeof e);
  e.kind = 7;
  EXPECT_STATUS(libroute_router_apply_kv_events(router, &e, 1), LIBROUTE_STATUS_INVALID_ARGUMENT);
  e.kind = LIBROUTE_KV_KIND_STORED;
  e.tier = 5;
  EXPECT_STATUS(libroute_router_apply_kv_events(router, &e, 1), LIBROUTE_STATUS_INVALID_ARGUMENT);
  e.tier = 0;
  e.hashes_len = 3;
  EXPECT_STATUS(libroute_router_apply_kv_events(router, &e, 1), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_router_apply_kv_events(NULL, &e, 1), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_router_apply_kv_events(router, NULL, 1), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_router_add_worker(NULL, worker(1)), LIBROUTE_STATUS_NULL_ARGUMENT);

  /* A 65th worker's KV event is refused and counted; the index keeps working. */
  e.hashes_len = 1;
  for (w = 0; w < 65; w++) {
    e.worker = worker(w);
    e.hashes = &w;
    EXPECT_STATUS(libroute_router_apply_kv_events(router, &e, 1), LIBROUTE_STATUS_OK);
  }
  CHECK(counters(router).rejected_kv_events == 1 && counters(router).index_workers == 64, "worker capacity");
  libroute_router_free(router);
  libroute_router_free(NULL);
}

/* vLLM's payload for worker 7: [ts, [["BlockStored", [11, 12], None, tokens 1..32, 16, None, "GPU"]]]. */
static size_t stored_payload(uint8_t *p) {
  static const uint8_t head[] = {0x92, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x91, 0x97, 0xab,
                                 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd',
                                 0x92, 11, 12, 0xc0, 0xdc, 0, 32};
  static const uint8_t tail[] = {16, 0xc0, 0xa3, 'G', 'P', 'U'};
  size_t n = 0, t;
  memcpy(p, head, sizeof head);
  n += sizeof head;
  for (t = 1; t <= 32; t++) p[n++] = (uint8_t)t;
  memcpy(p + n, tail, sizeof tail);
  return n + sizeof tail;
}

static void test_engine_kv_batches(void) {
  libroute_router_config cfg = config(0);
  libroute_router *router = NULL;
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  libroute_kv_batch_summary summary;
  libroute_request req = request(32);
  libroute_selection sel;
  libroute_row rows[2];
  uint8_t payload[128];
  size_t len = stored_payload(payload), written = 0;
  uint32_t tokens[33];
  uint64_t hashes[2];
  char detail[256];
  uint32_t t;
  for (t = 0; t < 33; t++) tokens[t] = t + 1;
  EXPECT_STATUS(libroute_router_new(&cfg, &router), LIBROUTE_STATUS_OK);
  libroute_policy_new_default(&policy);
  libroute_selector_new(16, 1, &selector);
  libroute_router_add_worker(router, worker(7));
  libroute_router_add_worker(router, worker(8));

  EXPECT_STATUS(libroute_router_apply_kv_batch(router, worker(7), payload, len, &summary),
                LIBROUTE_STATUS_INVALID_ARGUMENT);
  libroute_last_error(detail, sizeof detail, &written);
  CHECK(strstr(detail, "libroute_router_read_kv_batches") != NULL, "off until sized");
  EXPECT_STATUS(libroute_router_read_kv_batches(router, 0, 1024), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_router_read_kv_batches(router, 16, 1000), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_router_read_kv_batches(router, 16, 1024), LIBROUTE_STATUS_OK);

  /* Truncated: an error naming the byte, and nothing changes. */
  EXPECT_STATUS(libroute_router_apply_kv_batch(router, worker(7), payload, 40, &summary),
                LIBROUTE_STATUS_INVALID_ARGUMENT);
  libroute_last_error(detail, sizeof detail, &written);
  CHECK(strcmp(detail, "KV event payload, byte 40: the payload ends inside a value") == 0, detail);
  CHECK(counters(router).blocks == 0, "a refused payload changes nothing");

  EXPECT_STATUS(libroute_router_apply_kv_batch(router, worker(7), payload, len, &summary), LIBROUTE_STATUS_OK);
  CHECK(summary.events == 1 && summary.stored_blocks == 2 && summary.worker.worker_id == 7, "two blocks stored");
  CHECK(counters(router).blocks == 2, "the index holds them");
  EXPECT_STATUS(libroute_router_apply_kv_batch(router, worker(7), payload, len, NULL), LIBROUTE_STATUS_OK);

  /* A request hashed from the same tokens finds them on worker 7. */
  EXPECT_STATUS(libroute_block_hashes(tokens, 33, 16, NULL, 0, hashes, 1, &written), LIBROUTE_STATUS_BUFFER_TOO_SMALL);
  CHECK(written == 2, "two hashes are needed");
  EXPECT_STATUS(libroute_block_hashes(tokens, 33, 16, NULL, 0, hashes, 2, &written), LIBROUTE_STATUS_OK);
  CHECK(written == 2, "two complete blocks; the 33rd token is not hashed");
  EXPECT_STATUS(libroute_block_hashes(tokens, 33, 0, NULL, 0, hashes, 2, &written), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_block_hashes(tokens, 33, 16, NULL, 3, hashes, 2, &written), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_block_hashes(tokens, 33, 16, NULL, 0, hashes, 2, NULL), LIBROUTE_STATUS_NULL_ARGUMENT);
  memset(rows, 0, sizeof rows);
  rows[0].worker = worker(8);
  rows[1].worker = worker(7);
  EXPECT_STATUS(libroute_router_route(router, policy, selector, &req, hashes, 2, rows, 2, 1, 0, &sel), LIBROUTE_STATUS_OK);
  CHECK(sel.worker.worker_id == 7 && sel.cached_tokens == 32, "the engine's blocks are the request's");

  EXPECT_STATUS(libroute_router_apply_kv_batch(router, worker(7), NULL, 3, &summary), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_router_apply_kv_batch(NULL, worker(7), payload, len, &summary), LIBROUTE_STATUS_NULL_ARGUMENT);
  libroute_selector_free(selector);
  libroute_policy_free(policy);
  libroute_router_free(router);
}

/* The router's fleet: its workers kept between routes, looked for where they were last found. */
static void test_fleet(void) {
  libroute_router_config cfg = config(0);
  libroute_router *router = NULL;
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  uint64_t prompt[8] = {101, 102, 103, 104, 105, 106, 107, 108};
  libroute_kv_event event;
  libroute_row rows[4];
  libroute_request req = request(128);
  libroute_selection sel;
  size_t written = 0;
  uint64_t w;
  EXPECT_STATUS(libroute_router_new(&cfg, &router), LIBROUTE_STATUS_OK);
  libroute_policy_new_default(&policy);
  libroute_selector_new(16, 1, &selector);
  EXPECT_STATUS(libroute_router_route_fleet(router, policy, selector, &req, prompt, 8, 1, 0, &sel),
                LIBROUTE_STATUS_NO_ENDPOINTS);
  /* Added out of order; the fleet keeps its rows sorted by worker. */
  for (w = 4; w >= 1; w--) {
    EXPECT_STATUS(libroute_router_add_worker(router, worker(w)), LIBROUTE_STATUS_OK);
    EXPECT_STATUS(libroute_router_fleet_add(router, worker(w), 0), LIBROUTE_STATUS_OK);
  }
  EXPECT_STATUS(libroute_router_fleet_add(router, worker(2), 0), LIBROUTE_STATUS_DUPLICATE_WORKER);
  memset(&event, 0, sizeof event);
  event.kind = LIBROUTE_KV_KIND_STORED;
  event.worker = worker(3);
  event.hashes = prompt;
  event.hashes_len = 8;
  EXPECT_STATUS(libroute_router_apply_kv_events(router, &event, 1), LIBROUTE_STATUS_OK);

  EXPECT_STATUS(libroute_router_route_fleet(router, policy, selector, &req, prompt, 8, 1, 0, &sel), LIBROUTE_STATUS_OK);
  CHECK(sel.worker.worker_id == 3 && sel.row == 2 && sel.cached_tokens == 128, "the worker holding the prompt wins");
  EXPECT_STATUS(libroute_router_fleet_rows(router, NULL, 0, &written), LIBROUTE_STATUS_BUFFER_TOO_SMALL);
  CHECK(written == 4, "the fleet has 4 rows");
  EXPECT_STATUS(libroute_router_fleet_rows(router, rows, 4, &written), LIBROUTE_STATUS_OK);
  CHECK(rows[2].worker.worker_id == 3 && rows[2].device_blocks == 8 &&
            rows[2].flags == (LIBROUTE_ROW_HAS_CACHE | LIBROUTE_ROW_HAS_LOAD),
        "the fleet's rows hold what the route read");
  CHECK(counters(router).active_requests == 1, "the fleet route booked its request");

  /* Overloaded, the holder is skipped; taken out of the fleet, it is no candidate. */
  EXPECT_STATUS(libroute_router_fleet_set_overloaded(router, worker(3), 1), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_fleet_set_overloaded(router, worker(3), 2), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_router_route_fleet(router, policy, selector, &req, prompt, 8, 2, 0, &sel), LIBROUTE_STATUS_OK);
  CHECK(sel.worker.worker_id != 3, "an overloaded worker is skipped");
  EXPECT_STATUS(libroute_router_fleet_set_overloaded(router, worker(3), 0), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_fleet_set_taints(router, worker(3), 1), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_fleet_remove(router, worker(3)), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_router_fleet_remove(router, worker(3)), LIBROUTE_STATUS_UNKNOWN_WORKER);
  EXPECT_STATUS(libroute_router_route_fleet(router, policy, selector, &req, prompt, 8, 3, 0, &sel), LIBROUTE_STATUS_OK);
  CHECK(sel.worker.worker_id != 3 && sel.cached_tokens == 0, "a worker out of the fleet is no candidate");
  EXPECT_STATUS(libroute_router_route_fleet_at(router, policy, selector, &req, prompt, 8, 4, NAN, &sel),
                LIBROUTE_STATUS_INVALID_ARGUMENT);
  CHECK(counters(router).active_requests == 3, "three fleet routes booked, the failed ones nothing");

  libroute_selector_free(selector);
  libroute_policy_free(policy);
  libroute_router_free(router);
}

int main(void) {
  test_events_route_book_free();
  test_fleet();
  test_engine_kv_batches();
  test_replica_events();
  test_snapshot_restore();
  test_approximate_mode();
  test_timed_routing_calibrates_ttft();
  test_bad_input();
  return finish();
}
