// C++17 use of the C ABI: RAII handles, a lambda as a custom scorer, and one immutable policy
// shared by four threads, each with its own selector. Seeded selections must replay identically
// on every thread. Prints "N passed, N failed".

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "libroute.h"

namespace {

struct PolicyDeleter {
  void operator()(libroute_policy *p) const { libroute_policy_free(p); }
};
struct SelectorDeleter {
  void operator()(libroute_selector *s) const { libroute_selector_free(s); }
};
using Policy = std::unique_ptr<libroute_policy, PolicyDeleter>;
using Selector = std::unique_ptr<libroute_selector, SelectorDeleter>;

int passed = 0, failed = 0;

void check(bool ok, const char *what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAILED: %s\n", what);
  }
}

Policy make_policy(const std::string &json) {
  // A captureless lambda converts to the C function pointer: a queue-depth term per request.
  libroute_scorer queue{};
  queue.callback = [](void *, const libroute_request_info *, const libroute_row *rows, const uint32_t *order,
                      size_t len, double *costs) -> int32_t {
    for (size_t k = 0; k < len; ++k) costs[k] = 0.5 * static_cast<double>(rows[order[k]].active_requests);
    return 0;
  };
  queue.inputs = LIBROUTE_INPUT_LOAD;
  libroute_policy *raw = nullptr;
  libroute_status rc = libroute_policy_new_with_components(json.data(), json.size(), nullptr, 0, &queue, 1, &raw);
  check(rc == LIBROUTE_STATUS_OK, "policy created");
  return Policy(raw);
}

std::vector<libroute_row> fleet() {
  std::vector<libroute_row> rows(64);
  for (size_t i = 0; i < rows.size(); ++i) {
    libroute_row &r = rows[i];
    std::memset(&r, 0, sizeof r);
    r.worker.worker_id = i / 2;
    r.worker.dp_rank = static_cast<uint32_t>(i % 2);
    r.flags = LIBROUTE_ROW_HAS_CACHE | LIBROUTE_ROW_HAS_LOAD;
    r.device_blocks = static_cast<uint32_t>((7 * i) % 9);
    r.effective_blocks = r.device_blocks;
    r.effective_tokens = 16u * r.device_blocks;
    r.active_decode_blocks = i % 11;
    r.active_requests = i % 5;
  }
  return rows;
}

std::vector<uint64_t> run(const libroute_policy *policy, const std::vector<libroute_row> &rows, int n) {
  libroute_selector *raw = nullptr;
  libroute_selector_new(rows.size(), 0, &raw);
  Selector selector(raw);
  libroute_request req{};
  req.prompt_tokens = 300;
  req.block_size = 16;
  req.role = LIBROUTE_ROLE_AGGREGATED;
  req.track_prefill_tokens = 1;
  req.has_tier_matches = 1;
  std::vector<uint64_t> picks;
  for (int i = 0; i < n; ++i) {
    libroute_selection sel{};
    double parts[2];
    if (libroute_select(policy, selector.get(), &req, rows.data(), rows.size(), &sel, parts, 2) != LIBROUTE_STATUS_OK)
      return {};
    picks.push_back(sel.worker.worker_id * 2 + sel.worker.dp_rank);
  }
  return picks;
}

}  // namespace

int main() {
  const Policy policy = make_policy(R"({"temperature": 0.7, "seed": 42})");
  const std::vector<libroute_row> rows = fleet();
  const std::vector<uint64_t> expected = run(policy.get(), rows, 500);
  check(expected.size() == 500, "500 selections on the main thread");
  std::vector<std::vector<uint64_t>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] { results[t] = run(policy.get(), rows, 500); });
  for (std::thread &t : threads) t.join();
  for (const auto &r : results) check(r == expected, "each thread replays the seeded sequence");
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
