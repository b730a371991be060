/* Embedding libroute in a C inference server: build a policy once, keep one selector per
 * thread, fill rows from your cache index and load tracker, select, book. This is the README's
 * example; CI builds it against an installed prefix with pkg-config and with CMake. */

#include <stdio.h>
#include <string.h>

#include "libroute.h"

int main(void) {
  const char *config = "{\"overlap_score_credit\": 1.0, \"temperature\": 0.0}";
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  libroute_row rows[2];
  libroute_request req;
  libroute_selection sel;
  double contributions[1];
  char detail[256];
  size_t n = 0;
  libroute_status rc;

  if (libroute_policy_new(config, strlen(config), &policy) != LIBROUTE_STATUS_OK ||
      libroute_selector_new(64, /* entropy */ 12345, &selector) != LIBROUTE_STATUS_OK) {
    libroute_last_error(detail, sizeof detail, &n);
    fprintf(stderr, "setup failed: %s\n", detail);
    return 1;
  }

  /* Two workers: worker 1 holds 6 of the request's 8 blocks and has 4 decode blocks in flight;
   * worker 2 holds nothing and is idle. Rows live in your memory; libroute reads them in place. */
  memset(rows, 0, sizeof rows);
  rows[0].worker.worker_id = 1;
  rows[0].flags = LIBROUTE_ROW_HAS_CACHE | LIBROUTE_ROW_HAS_LOAD;
  rows[0].device_blocks = 6;
  rows[0].effective_blocks = 6.0;
  rows[0].effective_tokens = 96;
  rows[0].active_decode_blocks = 4;
  rows[1].worker.worker_id = 2;
  rows[1].flags = LIBROUTE_ROW_HAS_LOAD;

  memset(&req, 0, sizeof req);
  req.prompt_tokens = 128;
  req.block_size = 16;
  req.role = LIBROUTE_ROLE_AGGREGATED;
  req.track_prefill_tokens = 1;
  req.has_tier_matches = 1;

  rc = libroute_select(policy, selector, &req, rows, 2, &sel, contributions, 1);
  if (rc != LIBROUTE_STATUS_OK) {
    libroute_last_error(detail, sizeof detail, &n);
    fprintf(stderr, "select failed (%u): %s\n", (unsigned)rc, detail);
    return 1;
  }
  printf("libroute %s: worker %llu rank %u, cost %.2f (default cost %.2f), %llu of %llu blocks cached\n",
         libroute_version(), (unsigned long long)sel.worker.worker_id, sel.worker.dp_rank, sel.cost,
         contributions[0], (unsigned long long)(sel.cached_tokens / req.block_size),
         (unsigned long long)sel.request_blocks);

  libroute_selector_free(selector);
  libroute_policy_free(policy);
  return sel.worker.worker_id == 1 ? 0 : 1;
}
