/* The catalog through the C ABI: a policy by type, explanations of every row, named instances per
 * role, and the statuses of bad configurations. Prints "N passed, N failed". */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "libroute.h"
#include "check.h"

static libroute_row row(uint64_t id, uint32_t dev, uint64_t requests) {
  libroute_row r;
  memset(&r, 0, sizeof r);
  r.worker.worker_id = id;
  r.flags = LIBROUTE_ROW_HAS_CACHE | LIBROUTE_ROW_HAS_LOAD;
  r.device_blocks = dev;
  r.effective_blocks = dev;
  r.effective_tokens = (uint64_t)dev * 16;
  r.active_prefill_tokens = requests * 100;
  r.active_decode_blocks = requests * 10;
  r.active_requests = requests;
  return r;
}

static libroute_request request(void) {
  libroute_request r;
  memset(&r, 0, sizeof r);
  r.prompt_tokens = 160; /* 10 blocks */
  r.block_size = 16;
  r.role = LIBROUTE_ROLE_AGGREGATED;
  r.track_prefill_tokens = 1;
  return r;
}

static libroute_status policy(const char *json, libroute_policy **out) {
  return libroute_policy_new(json, strlen(json), out);
}

static void test_dynamo_two_tier_explained(void) {
  /* Requests 10, 12, 40 (spread 30 <= 32); the best overlap, 6 of 10 blocks, covers more than
   * half: cost = 6 - dev. Worker 4 is filtered by the overload limit of 30 requests. */
  const char *json =
      "{\"type\": \"dynamo_two_tier\", \"filters\": [{\"type\": \"overload\", \"max_requests\": 30}]}";
  libroute_policy *p = NULL;
  libroute_selector *s = NULL;
  libroute_row rows[4];
  libroute_explanation ex[4];
  libroute_selection sel;
  libroute_request req = request();
  rows[0] = row(1, 2, 10);
  rows[1] = row(2, 6, 12);
  rows[2] = row(3, 0, 20);
  rows[3] = row(4, 9, 40);
  EXPECT_STATUS(policy(json, &p), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_selector_new(16, 1, &s), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_select_explained(p, s, &req, rows, 4, &sel, ex, 4), LIBROUTE_STATUS_OK);
  CHECK(sel.worker.worker_id == 2 && sel.cost == 0.0, "worker 2 at cost 0");
  CHECK(ex[0].disposition == LIBROUTE_DISPOSITION_CANDIDATE && ex[0].total == 4.0, "row 0: 6 - 2");
  CHECK(ex[1].chosen == 1 && ex[1].scorers == 1 && ex[1].contributions[0] == 0.0, "row 1 chosen");
  CHECK(ex[2].total == 6.0, "row 2: 6 - 0");
  CHECK(ex[3].disposition == LIBROUTE_DISPOSITION_FILTER_OVERLOADED && ex[3].filter == 0 &&
            ex[3].scorers == 0 && isnan(ex[3].total),
        "row 3 overloaded by filter 0");
  /* Too small a buffer: refused before selecting. */
  EXPECT_STATUS(libroute_select_explained(p, s, &req, rows, 4, &sel, ex, 3),
                LIBROUTE_STATUS_BUFFER_TOO_SMALL);
  /* A failed selection still explains: every row overloaded. */
  rows[0].flags |= LIBROUTE_ROW_OVERLOADED;
  rows[1].flags |= LIBROUTE_ROW_OVERLOADED;
  rows[2].flags |= LIBROUTE_ROW_OVERLOADED;
  EXPECT_STATUS(libroute_select_explained(p, s, &req, rows, 4, &sel, ex, 4),
                LIBROUTE_STATUS_ALL_OVERLOADED);
  CHECK(ex[0].disposition == LIBROUTE_DISPOSITION_OVERLOADED, "row 0 overloaded by the host");
  libroute_selector_free(s);
  libroute_policy_free(p);
}

static void test_policy_set_roles(void) {
  const char *json =
      "{\"instances\": [{\"name\": \"cache\", \"policy\": {\"type\": \"sglang_cache_aware\"}},"
      "                 {\"name\": \"rr\", \"policy\": {\"type\": \"round_robin\"}}],"
      " \"roles\": {\"prefill\": \"cache\", \"decode\": \"rr\"}}";
  libroute_policy_set *set = NULL;
  const libroute_policy *prefill = NULL, *decode = NULL, *agg = NULL;
  libroute_selector *s = NULL;
  libroute_row rows[2];
  libroute_selection sel;
  libroute_request req = request();
  char name[16];
  uint64_t picks[4];
  int i;
  rows[0] = row(1, 1, 5);
  rows[1] = row(2, 4, 10);
  EXPECT_STATUS(libroute_policy_set_new(json, strlen(json), &set), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_policy_set_get(set, LIBROUTE_ROLE_PREFILL, &prefill, name, sizeof name),
                LIBROUTE_STATUS_OK);
  CHECK(strcmp(name, "cache") == 0, "prefill is served by instance cache");
  EXPECT_STATUS(libroute_policy_set_get(set, LIBROUTE_ROLE_DECODE, &decode, NULL, 0), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_policy_set_get(set, LIBROUTE_ROLE_AGGREGATED, &agg, name, sizeof name),
                LIBROUTE_STATUS_OK);
  CHECK(strcmp(name, "default") == 0, "aggregated falls back to the default policy");
  EXPECT_STATUS(libroute_policy_set_get(set, 9, &agg, NULL, 0), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_policy_set_get(set, LIBROUTE_ROLE_PREFILL, &prefill, name, 3),
                LIBROUTE_STATUS_BUFFER_TOO_SMALL);
  EXPECT_STATUS(libroute_selector_new(4, 1, &s), LIBROUTE_STATUS_OK);
  /* Balanced (spread 5), best match 4 of 10 > 0.3: the longest match. */
  EXPECT_STATUS(libroute_select(prefill, s, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_OK);
  CHECK(sel.worker.worker_id == 2, "sglang follows the longest match");
  for (i = 0; i < 4; i++) {
    libroute_select(decode, s, &req, rows, 2, &sel, NULL, 0);
    picks[i] = sel.worker.worker_id;
  }
  CHECK(picks[0] == 1 && picks[1] == 2 && picks[2] == 1 && picks[3] == 2, "round robin 1 2 1 2");
  libroute_selector_free(s);
  libroute_policy_set_free(set);
}

static void test_bad_configurations(void) {
  libroute_policy *p = NULL;
  libroute_policy_set *set = NULL;
  const char *unknown_role = "{\"roles\": {\"decode\": \"nope\"}}";
  const char *dup = "{\"instances\": [{\"name\": \"a\", \"policy\": {\"type\": \"random\"}},"
                    "{\"name\": \"a\", \"policy\": {\"type\": \"random\"}}]}";
  char detail[256];
  size_t n = 0;
  EXPECT_STATUS(policy("{\"type\": \"fastest\"}", &p), LIBROUTE_STATUS_UNKNOWN_KEY);
  libroute_last_error(detail, sizeof detail, &n);
  CHECK(strstr(detail, "fastest") != NULL, "the detail names the unknown type");
  EXPECT_STATUS(policy("{\"type\": \"least_loaded\", \"metrc\": 1}", &p), LIBROUTE_STATUS_UNKNOWN_KEY);
  EXPECT_STATUS(policy("{\"type\": \"power_of_two\", \"k\": 0}", &p), LIBROUTE_STATUS_INVALID_KNOB);
  libroute_last_error(detail, sizeof detail, &n);
  CHECK(strstr(detail, "k = 0") != NULL, "the detail names the parameter");
  EXPECT_STATUS(policy("{\"type\": \"default\", \"temperature\": -1}", &p), LIBROUTE_STATUS_INVALID_KNOB);
  EXPECT_STATUS(libroute_policy_set_new(unknown_role, strlen(unknown_role), &set), LIBROUTE_STATUS_INVALID_KNOB);
  libroute_last_error(detail, sizeof detail, &n);
  CHECK(strstr(detail, "nope") != NULL, "the detail names the missing instance");
  EXPECT_STATUS(libroute_policy_set_new(dup, strlen(dup), &set), LIBROUTE_STATUS_INVALID_KNOB);
  EXPECT_STATUS(libroute_policy_set_new("{", 1, &set), LIBROUTE_STATUS_INVALID_JSON);
  EXPECT_STATUS(libroute_policy_set_new(NULL, 0, NULL), LIBROUTE_STATUS_NULL_ARGUMENT);
  libroute_policy_set_free(NULL);
}

static void test_every_builtin_round_trips(void) {
  static const char *types[] = {
      "{\"type\": \"default\", \"temperature\": 0.5, \"seed\": 1}",
      "{\"type\": \"round_robin\"}",
      "{\"type\": \"random\", \"seed\": 3}",
      "{\"type\": \"power_of_two\", \"k\": 3, \"metric\": \"active_blocks\"}",
      "{\"type\": \"least_loaded\", \"metric\": \"prefill_tokens\"}",
      "{\"type\": \"dynamo_two_tier\", \"spread\": 16, \"ratio\": 1.2, \"coverage\": 0.4}",
      "{\"type\": \"sglang_cache_aware\", \"abs_threshold\": 32, \"rel_threshold\": 2, \"match_threshold\": 0.2}",
      "{\"type\": \"llm_d\", \"prefix_weight\": 2, \"kv_capacity_blocks\": 100, \"host_credit\": 0.7}",
      "{\"type\": \"composed\", \"filters\": [{\"type\": \"allow_list\", \"workers\": [1, 2, 3]},"
      " {\"type\": \"require_taints\", \"taints\": []}, {\"type\": \"overload\", \"max_active_blocks\": 500}],"
      " \"scorers\": [{\"type\": \"default\", \"knobs\": {\"prefill_load_scale\": 2}},"
      " {\"type\": \"prefix\", \"weight\": 3}, {\"type\": \"kv_utilization\", \"capacity_blocks\": 64},"
      " {\"type\": \"queue\"}, {\"type\": \"session_affinity\"}, {\"type\": \"least_loaded\"},"
      " {\"type\": \"dynamo_two_tier\"}, {\"type\": \"sglang_cache_aware\"}],"
      " \"picker\": {\"type\": \"power_of_choices\", \"k\": 2}, \"seed\": 9}",
  };
  libroute_row rows[3];
  libroute_request req = request();
  libroute_selection sel;
  libroute_selector *s = NULL;
  size_t i;
  rows[0] = row(1, 2, 10);
  rows[1] = row(2, 6, 12);
  rows[2] = row(3, 0, 40);
  req.has_session = 1;
  req.session = 77;
  EXPECT_STATUS(libroute_selector_new(8, 1, &s), LIBROUTE_STATUS_OK);
  for (i = 0; i < sizeof types / sizeof types[0]; i++) {
    libroute_policy *p = NULL;
    EXPECT_STATUS(policy(types[i], &p), LIBROUTE_STATUS_OK);
    EXPECT_STATUS(libroute_select(p, s, &req, rows, 3, &sel, NULL, 0), LIBROUTE_STATUS_OK);
    CHECK(sel.worker.worker_id >= 1 && sel.worker.worker_id <= 3, types[i]);
    libroute_policy_free(p);
  }
  req.has_session = 2;
  {
    libroute_policy *p = NULL;
    policy("{\"type\": \"random\"}", &p);
    EXPECT_STATUS(libroute_select(p, s, &req, rows, 3, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_ARGUMENT);
    libroute_policy_free(p);
  }
  libroute_selector_free(s);
}

int main(void) {
  test_every_builtin_round_trips();
  test_dynamo_two_tier_explained();
  test_policy_set_roles();
  test_bad_configurations();
  return finish();
}
