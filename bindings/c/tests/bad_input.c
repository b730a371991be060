/* Bad input from C: every case returns its documented status, writes no out-parameter, and
 * leaves a detail message; nothing crashes. Also: a good selection, the version facts, status
 * messages. Prints "N passed, N failed". */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "libroute.h"
#include "check.h"


static const char *last_error(void) {
  static char buf[512];
  size_t n = 0;
  if (libroute_last_error(buf, sizeof buf, &n) != LIBROUTE_STATUS_OK) return "";
  return buf;
}

static libroute_request request(uint64_t prompt) {
  libroute_request r;
  memset(&r, 0, sizeof r);
  r.prompt_tokens = prompt;
  r.block_size = 16;
  r.role = LIBROUTE_ROLE_AGGREGATED;
  r.track_prefill_tokens = 1;
  r.has_tier_matches = 1;
  return r;
}

static libroute_row row(uint64_t id, uint32_t device, uint64_t decode) {
  libroute_row r;
  memset(&r, 0, sizeof r);
  r.worker.worker_id = id;
  r.flags = LIBROUTE_ROW_HAS_CACHE | LIBROUTE_ROW_HAS_LOAD;
  r.device_blocks = device;
  r.effective_blocks = device;
  r.effective_tokens = (uint64_t)device * 16;
  r.active_decode_blocks = decode;
  return r;
}

static int32_t nan_scorer(void *user_data, const libroute_request_info *req, const libroute_row *rows,
                          const uint32_t *order, size_t len, double *costs) {
  size_t k;
  (void)user_data;
  (void)req;
  (void)rows;
  (void)order;
  for (k = 0; k < len; k++) costs[k] = NAN;
  return 0;
}

static int32_t inf_scorer(void *user_data, const libroute_request_info *req, const libroute_row *rows,
                          const uint32_t *order, size_t len, double *costs) {
  size_t k;
  (void)user_data;
  (void)req;
  (void)rows;
  (void)order;
  for (k = 0; k < len; k++) costs[k] = INFINITY;
  return 0;
}

static int32_t failing_scorer(void *user_data, const libroute_request_info *req, const libroute_row *rows,
                              const uint32_t *order, size_t len, double *costs) {
  (void)user_data;
  (void)req;
  (void)rows;
  (void)order;
  (void)len;
  (void)costs;
  return 17;
}

/* Charges each candidate its worker id / 10, read through the row the callback receives. */
static int32_t id_scorer(void *user_data, const libroute_request_info *req, const libroute_row *rows,
                         const uint32_t *order, size_t len, double *costs) {
  size_t k;
  (void)user_data;
  (void)req;
  for (k = 0; k < len; k++) costs[k] = (double)rows[order[k]].worker.worker_id / 10.0;
  return 0;
}

static int32_t failing_filter(void *user_data, const libroute_request_info *req, const libroute_row *row,
                              uint32_t *verdict) {
  (void)user_data;
  (void)req;
  (void)row;
  (void)verdict;
  return -3;
}

static void test_good_selection(void) {
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  libroute_row rows[2];
  libroute_request req = request(128);
  libroute_selection sel;
  double parts[4] = {0};
  uint8_t inputs = 0;
  libroute_scorer extra;
  extra.callback = id_scorer;
  extra.user_data = NULL;
  extra.inputs = 0;
  rows[0] = row(10, 6, 4);
  rows[1] = row(20, 0, 0);
  EXPECT_STATUS(libroute_policy_new_with_components(NULL, 0, NULL, 0, &extra, 1, &policy), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_selector_new(8, 42, &selector), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, parts, 4), LIBROUTE_STATUS_OK);
  /* Worker 10: 8 blocks - 6 cached + 4 decode = 6, plus 1.0 from the callback; worker 20: 8 + 2. */
  CHECK(sel.row == 0 && sel.worker.worker_id == 10, "the warm worker wins");
  CHECK(sel.cost == 7.0 && parts[0] == 6.0 && parts[1] == 1.0 && sel.scorers == 2, "cost and contributions");
  CHECK(sel.request_blocks == 8 && sel.cached_tokens == 96, "accounting values");
  CHECK(sel.reason == LIBROUTE_REASON_MIN_COST && sel.ties == 1, "the reason");
  EXPECT_STATUS(libroute_policy_inputs(policy, LIBROUTE_ROLE_DECODE, 0, &inputs), LIBROUTE_STATUS_OK);
  CHECK(inputs == (LIBROUTE_INPUT_LOAD | LIBROUTE_INPUT_PREFERRED_TAINT), "plain decode needs no CACHE");
  libroute_selector_free(selector);
  libroute_policy_free(policy);
}

static void test_null_handles_and_arrays(void) {
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  libroute_row rows[1];
  libroute_request req = request(16);
  libroute_selection sel;
  libroute_selection untouched;
  rows[0] = row(1, 0, 0);
  libroute_policy_new_default(&policy);
  libroute_selector_new(4, 1, &selector);
  memset(&sel, 0xAB, sizeof sel);
  untouched = sel;
  EXPECT_STATUS(libroute_select(NULL, selector, &req, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_select(policy, NULL, &req, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_select(policy, selector, NULL, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_select(policy, selector, &req, NULL, 1, &sel, NULL, 0), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 1, NULL, NULL, 0), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_policy_new_default(NULL), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_selector_new(4, 0, NULL), LIBROUTE_STATUS_NULL_ARGUMENT);
  EXPECT_STATUS(libroute_policy_new(NULL, 5, &policy), LIBROUTE_STATUS_NULL_ARGUMENT);
  req.preferred_taints_len = 2; /* with a NULL array */
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_NULL_ARGUMENT);
  CHECK(memcmp(&sel, &untouched, sizeof sel) == 0, "out-parameters are untouched on failure");
  CHECK(strstr(last_error(), "NULL") != NULL, "the detail names the NULL argument");
  libroute_policy_free(NULL);
  libroute_selector_free(NULL);
  libroute_selector_free(selector);
  libroute_policy_free(policy);
}

static void test_rows(void) {
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  libroute_row rows[3];
  libroute_request req = request(16);
  libroute_selection sel;
  rows[0] = row(1, 0, 0);
  rows[1] = row(2, 0, 0);
  rows[2] = row(3, 0, 0);
  libroute_policy_new_default(&policy);
  libroute_selector_new(2, 1, &selector);
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 0, &sel, NULL, 0), LIBROUTE_STATUS_NO_ENDPOINTS);
  CHECK(strcmp(last_error(), "no endpoints: no eligible worker among the rows") == 0, "no-endpoints detail");
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 3, &sel, NULL, 0), LIBROUTE_STATUS_CAPACITY_EXCEEDED);
  CHECK(strcmp(last_error(), "3 rows exceed the selector's capacity of 2") == 0, "capacity detail");
  rows[1].effective_blocks = NAN;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_ROW);
  CHECK(strcmp(last_error(), "invalid row 1: effective_blocks is NaN, infinite or negative") == 0, "NaN detail");
  rows[1].effective_blocks = INFINITY;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_ROW);
  rows[1].effective_blocks = -1.0;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_ROW);
  rows[1] = row(2, 0, 0);
  rows[1].flags |= 1u << 7;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_ROW);
  rows[0].flags |= LIBROUTE_ROW_OVERLOADED;
  rows[1] = row(2, 0, 0);
  rows[1].flags |= LIBROUTE_ROW_OVERLOADED;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_ALL_OVERLOADED);
  libroute_selector_free(selector);
  libroute_policy_free(policy);
}

static void test_enums_and_booleans(void) {
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  libroute_row rows[1];
  libroute_request req = request(16);
  libroute_selection sel;
  libroute_preferred_taint bad_taint;
  uint8_t inputs = 0;
  rows[0] = row(1, 0, 0);
  libroute_policy_new_default(&policy);
  libroute_selector_new(4, 1, &selector);
  req.role = 4;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(last_error(), "role 4") != NULL, "the detail names the role");
  req = request(16);
  req.track_prefill_tokens = 2;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_ARGUMENT);
  req = request(16);
  req.block_size = 0;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_REQUEST);
  req = request(16);
  bad_taint.taint = 64;
  bad_taint.weight = 1.0;
  req.preferred_taints = &bad_taint;
  req.preferred_taints_len = 1;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_REQUEST);
  bad_taint.taint = 3;
  bad_taint.weight = NAN;
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 1, &sel, NULL, 0), LIBROUTE_STATUS_INVALID_REQUEST);
  EXPECT_STATUS(libroute_policy_inputs(policy, 99, 0, &inputs), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_policy_inputs(policy, LIBROUTE_ROLE_DECODE, 7, &inputs), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_selector_new(0, 1, &selector), LIBROUTE_STATUS_INVALID_ARGUMENT);
  libroute_selector_free(selector);
  libroute_policy_free(policy);
}

static void test_configuration(void) {
  libroute_policy *policy = NULL;
  const char *bad_json = "{\"temperature\": ";
  const char *unknown = "{\"temprature\": 0.5}";
  const char *knob = "{\"shared_cache_multiplier\": 2}";
  const char *conflict = "{\"overlap_score_weight\": 1, \"prefill_load_scale\": 2}";
  EXPECT_STATUS(libroute_policy_new(bad_json, strlen(bad_json), &policy), LIBROUTE_STATUS_INVALID_JSON);
  EXPECT_STATUS(libroute_policy_new(unknown, strlen(unknown), &policy), LIBROUTE_STATUS_UNKNOWN_KEY);
  CHECK(strstr(last_error(), "temprature") != NULL, "the detail names the unknown key");
  EXPECT_STATUS(libroute_policy_new(knob, strlen(knob), &policy), LIBROUTE_STATUS_INVALID_KNOB);
  CHECK(strcmp(last_error(), "invalid shared_cache_multiplier = 2: must be within [0, 1]") == 0, "knob detail");
  EXPECT_STATUS(libroute_policy_new(conflict, strlen(conflict), &policy), LIBROUTE_STATUS_INVALID_KNOB);
  CHECK(strstr(last_error(), "conflicts with prefill_load_scale") != NULL, "conflict detail");
  CHECK(policy == NULL, "no policy was written");
}

static void test_callbacks(void) {
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  libroute_row rows[2];
  libroute_request req = request(16);
  libroute_selection sel;
  libroute_scorer scorer;
  libroute_filter filter;
  rows[0] = row(1, 0, 0);
  rows[1] = row(2, 0, 0);
  libroute_selector_new(4, 1, &selector);
  scorer.user_data = NULL;
  scorer.inputs = 0;

  scorer.callback = nan_scorer;
  EXPECT_STATUS(libroute_policy_new_with_components(NULL, 0, NULL, 0, &scorer, 1, &policy), LIBROUTE_STATUS_OK);
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_NON_FINITE_COST);
  CHECK(strcmp(last_error(), "scorer 1 gave row 0 a non-finite or unwritten cost") == 0, "NaN callback detail");
  libroute_policy_free(policy);

  scorer.callback = inf_scorer;
  libroute_policy_new_with_components(NULL, 0, NULL, 0, &scorer, 1, &policy);
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_NON_FINITE_COST);
  libroute_policy_free(policy);

  scorer.callback = failing_scorer;
  libroute_policy_new_with_components(NULL, 0, NULL, 0, &scorer, 1, &policy);
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_SCORER_FAILED);
  CHECK(strstr(last_error(), "code 17") != NULL, "the detail carries the callback's code");
  libroute_policy_free(policy);

  filter.callback = failing_filter;
  filter.user_data = NULL;
  filter.inputs = 0;
  libroute_policy_new_with_components(NULL, 0, &filter, 1, NULL, 0, &policy);
  EXPECT_STATUS(libroute_select(policy, selector, &req, rows, 2, &sel, NULL, 0), LIBROUTE_STATUS_FILTER_FAILED);
  libroute_policy_free(policy);

  scorer.callback = NULL;
  policy = NULL;
  EXPECT_STATUS(libroute_policy_new_with_components(NULL, 0, NULL, 0, &scorer, 1, &policy), LIBROUTE_STATUS_NULL_ARGUMENT);
  scorer.callback = id_scorer;
  scorer.inputs = 0x80;
  EXPECT_STATUS(libroute_policy_new_with_components(NULL, 0, NULL, 0, &scorer, 1, &policy), LIBROUTE_STATUS_INVALID_ARGUMENT);
  CHECK(policy == NULL, "no policy was written");
  libroute_selector_free(selector);
}

static void test_messages_and_version(void) {
  char buf[128];
  size_t n = 0;
  unsigned major = 0, minor = 0, patch = 0;
  EXPECT_STATUS(libroute_status_message(LIBROUTE_STATUS_ALL_OVERLOADED, buf, sizeof buf, &n), LIBROUTE_STATUS_OK);
  CHECK(strcmp(buf, "all eligible workers overloaded") == 0 && n == strlen(buf), "a status message");
  EXPECT_STATUS(libroute_status_message(4242, buf, sizeof buf, &n), LIBROUTE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(libroute_status_message(LIBROUTE_STATUS_OK, buf, 1, &n), LIBROUTE_STATUS_BUFFER_TOO_SMALL);
  CHECK(strcmp(libroute_version(), LIBROUTE_VERSION) == 0, "libroute_version() == LIBROUTE_VERSION");
  CHECK(sscanf(libroute_version(), "%u.%u.%u", &major, &minor, &patch) == 3, "the version parses");
  CHECK(major == LIBROUTE_VERSION_MAJOR && minor == LIBROUTE_VERSION_MINOR && patch == LIBROUTE_VERSION_PATCH,
        "the version macros agree");
}

int main(void) {
  test_good_selection();
  test_null_handles_and_arrays();
  test_rows();
  test_enums_and_booleans();
  test_configuration();
  test_callbacks();
  test_messages_and_version();
  return finish();
}
