/* Runs the golden scenario corpus (the .jsonl files in testdata/scenarios) through the C ABI and checks every
 * expected cost bit for bit, the minimum-cost set, the seeded pick sequence and the error, exactly
 * as the Rust runner (`cargo xtask scenarios`) does. Prints one line per mismatch and a closing
 * "N passed, N failed" line; exits non-zero on any mismatch.
 *
 * Usage: corpus FILE.jsonl...
 *
 * The file is C11 and also compiles as C++17 (the C++ build runs the same corpus). It carries a
 * small JSON reader of its own so the test needs nothing but libroute. */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libroute.h"

/* ---------------------------------------------------------------------------------------------
 * A minimal JSON reader: enough for the corpus (objects, arrays, numbers, strings, literals). */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jkind;

typedef struct jval {
  jkind kind;
  int boolean;
  double num;
  char *str;           /* J_STR: the string; J_OBJ members: the key */
  struct jval *items;  /* J_ARR / J_OBJ: children */
  size_t len;
  struct jval *value;  /* J_OBJ member: the member's value (items are members) */
} jval;

typedef struct {
  const char *p;
  int error;
} jreader;

static void skip_ws(jreader *r) {
  while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') r->p++;
}

static jval *jparse(jreader *r);

static char *jstring(jreader *r) {
  const char *start = ++r->p; /* after the quote */
  size_t n = 0;
  char *out;
  while (r->p[n] && r->p[n] != '"') {
    if (r->p[n] == '\\') n++; /* the corpus has no escapes but skip them safely */
    if (r->p[n]) n++;
  }
  if (r->p[n] != '"') {
    r->error = 1;
    return NULL;
  }
  out = (char *)malloc(n + 1);
  memcpy(out, start, n);
  out[n] = '\0';
  r->p += n + 1;
  return out;
}

static jval *jnew(jkind kind) {
  jval *v = (jval *)calloc(1, sizeof(jval));
  v->kind = kind;
  return v;
}

static void jpush(jval *container, const jval *item) {
  container->items = (jval *)realloc(container->items, (container->len + 1) * sizeof(jval));
  container->items[container->len++] = *item;
}

static jval *jparse(jreader *r) {
  jval *v;
  skip_ws(r);
  if (*r->p == '{' || *r->p == '[') {
    int object = *r->p == '{';
    char close = object ? '}' : ']';
    v = jnew(object ? J_OBJ : J_ARR);
    r->p++;
    skip_ws(r);
    if (*r->p == close) {
      r->p++;
      return v;
    }
    for (;;) {
      jval member;
      memset(&member, 0, sizeof member);
      skip_ws(r);
      if (object) {
        if (*r->p != '"') { r->error = 1; return v; }
        member.str = jstring(r);
        skip_ws(r);
        if (*r->p != ':') { r->error = 1; return v; }
        r->p++;
        member.value = jparse(r);
      } else {
        jval *item = jparse(r);
        member = *item;
        free(item);
      }
      jpush(v, &member);
      if (r->error) return v;
      skip_ws(r);
      if (*r->p == ',') { r->p++; continue; }
      if (*r->p == close) { r->p++; return v; }
      r->error = 1;
      return v;
    }
  }
  if (*r->p == '"') {
    v = jnew(J_STR);
    v->str = jstring(r);
    return v;
  }
  if (strncmp(r->p, "null", 4) == 0) { r->p += 4; return jnew(J_NULL); }
  if (strncmp(r->p, "true", 4) == 0) { r->p += 4; v = jnew(J_BOOL); v->boolean = 1; return v; }
  if (strncmp(r->p, "false", 5) == 0) { r->p += 5; return jnew(J_BOOL); }
  {
    char *end;
    double x = strtod(r->p, &end); /* glibc's strtod rounds correctly */
    if (end == r->p) { r->error = 1; return jnew(J_NULL); }
    r->p = end;
    v = jnew(J_NUM);
    v->num = x;
    return v;
  }
}

static void jfree_children(jval *v) {
  size_t i;
  for (i = 0; i < v->len; i++) {
    jval *c = &v->items[i];
    if (v->kind == J_OBJ) {
      free(c->str);
      jfree_children(c->value);
      free(c->value);
    } else {
      jfree_children(c);
    }
  }
  free(v->items);
  if (v->kind == J_STR) free(v->str);
}

static const jval *jget(const jval *obj, const char *key) {
  size_t i;
  if (!obj || obj->kind != J_OBJ) return NULL;
  for (i = 0; i < obj->len; i++)
    if (strcmp(obj->items[i].str, key) == 0) return obj->items[i].value;
  return NULL;
}

static int is_null(const jval *v) { return !v || v->kind == J_NULL; }

static double jnum(const jval *v) {
  if (v && v->kind == J_STR) { /* "NaN", "inf", "-inf": floats JSON cannot spell */
    if (strcmp(v->str, "NaN") == 0) return NAN;
    if (strcmp(v->str, "inf") == 0) return INFINITY;
    if (strcmp(v->str, "-inf") == 0) return -INFINITY;
  }
  return v && v->kind == J_NUM ? v->num : 0.0;
}

static uint64_t jint(const jval *v) { return (uint64_t)jnum(v); }

/* Serialises a value back to JSON, numbers with 17 significant digits (round-trip exact). */
static void jwrite(const jval *v, char *buf, size_t cap, size_t *len, const char *skip_a, const char *skip_b) {
  size_t i;
  int first = 1;
#define PUT(...) (*len += (size_t)snprintf(buf + *len, *len < cap ? cap - *len : 0, __VA_ARGS__))
  switch (v->kind) {
    case J_NULL: PUT("null"); break;
    case J_BOOL: PUT(v->boolean ? "true" : "false"); break;
    case J_NUM: PUT("%.17g", v->num); break;
    case J_STR: PUT("\"%s\"", v->str); break;
    case J_ARR:
      PUT("[");
      for (i = 0; i < v->len; i++) {
        if (i) PUT(",");
        jwrite(&v->items[i], buf, cap, len, NULL, NULL);
      }
      PUT("]");
      break;
    case J_OBJ:
      PUT("{");
      for (i = 0; i < v->len; i++) {
        if ((skip_a && strcmp(v->items[i].str, skip_a) == 0) || (skip_b && strcmp(v->items[i].str, skip_b) == 0))
          continue;
        if (!first) PUT(",");
        first = 0;
        PUT("\"%s\":", v->items[i].str);
        jwrite(v->items[i].value, buf, cap, len, NULL, NULL);
      }
      PUT("}");
      break;
  }
#undef PUT
}

/* --------------------------------------------------------------------------------------------- */

static const char *error_name(libroute_status rc) {
  switch (rc) {
    case LIBROUTE_STATUS_NO_ENDPOINTS: return "no_endpoints";
    case LIBROUTE_STATUS_ALL_FILTERED: return "all_filtered";
    case LIBROUTE_STATUS_ALL_OVERLOADED: return "all_overloaded";
    case LIBROUTE_STATUS_CAPACITY_EXCEEDED: return "capacity_exceeded";
    case LIBROUTE_STATUS_INVALID_REQUEST: return "invalid_request";
    case LIBROUTE_STATUS_INVALID_ROW: return "invalid_row";
    case LIBROUTE_STATUS_DUPLICATE_WORKER: return "duplicate_worker";
    case LIBROUTE_STATUS_PIN_NOT_ALLOWED: return "pin_not_allowed";
    case LIBROUTE_STATUS_PIN_OVERLOADED: return "pin_overloaded";
    case LIBROUTE_STATUS_PIN_INELIGIBLE: return "pin_ineligible";
    case LIBROUTE_STATUS_NON_FINITE_COST: return "non_finite_cost";
    case LIBROUTE_STATUS_NON_FINITE_TOTAL: return "non_finite_total";
    case LIBROUTE_STATUS_PICK_OUT_OF_RANGE: return "pick_out_of_range";
    case LIBROUTE_STATUS_FILTER_FAILED: return "filter_failed";
    case LIBROUTE_STATUS_SCORER_FAILED: return "scorer_failed";
    case LIBROUTE_STATUS_PICKER_FAILED: return "picker_failed";
    case LIBROUTE_STATUS_INVALID_JSON:
    case LIBROUTE_STATUS_UNKNOWN_KEY:
    case LIBROUTE_STATUS_INVALID_KNOB: return "invalid_config";
    default: return "other";
  }
}

static uint64_t taint_mask(const jval *list) {
  uint64_t mask = 0;
  size_t i;
  for (i = 0; list && i < list->len; i++) mask |= (uint64_t)1 << jint(&list->items[i]);
  return mask;
}

static uint64_t bits_of(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

static int g_mismatches;

#define MISMATCH(...)               \
  do {                              \
    printf("%s: ", name);           \
    printf(__VA_ARGS__);            \
    printf("\n");                   \
    ok = 0;                         \
  } while (0)

/* Evaluates one scenario; returns 1 when everything matched. */
static int run_scenario(const jval *s) {
  const char *name = jget(s, "name")->str;
  const jval *req_j = jget(s, "request"), *cands = jget(s, "candidates"), *expect = jget(s, "expect");
  const jval *exp_err = jget(expect, "error"), *picks = jget(expect, "picks");
  const char *want_error = is_null(exp_err) ? NULL : exp_err->str;
  char policy_json[4096];
  size_t policy_len = 0, i, n = cands->len;
  libroute_policy *policy = NULL;
  libroute_selector *selector = NULL;
  libroute_request req;
  libroute_row *rows = (libroute_row *)calloc(n ? n : 1, sizeof(libroute_row));
  libroute_preferred_taint prefs[64];
  libroute_block_range hits[64];
  libroute_selection sel;
  libroute_status rc;
  size_t *idx = (size_t *)calloc(n ? n : 1, sizeof(size_t));
  double *costs = (double *)calloc(n ? n : 1, sizeof(double));
  double *by_row = (double *)calloc(n ? n : 1, sizeof(double));
  int *present = (int *)calloc(n ? n : 1, sizeof(int));
  size_t m = 0;
  int ok = 1;

  jwrite(jget(s, "policy"), policy_json, sizeof policy_json, &policy_len, NULL, NULL);
  rc = libroute_policy_new(policy_json, policy_len, &policy);
  if (rc != LIBROUTE_STATUS_OK) {
    if (!want_error || strcmp(want_error, "invalid_config") != 0)
      MISMATCH("error: expected %s, actual invalid_config (%u)", want_error ? want_error : "none", (unsigned)rc);
    goto done;
  }
  if (libroute_selector_new(LIBROUTE_MAX_CAPACITY, 1, &selector) != LIBROUTE_STATUS_OK) {
    MISMATCH("cannot create a selector");
    goto done;
  }

  memset(&req, 0, sizeof req);
  req.prompt_tokens = jint(jget(req_j, "prompt_tokens"));
  req.block_size = (uint32_t)jint(jget(req_j, "block_size"));
  {
    const char *role = jget(req_j, "role")->str;
    req.role = strcmp(role, "prefill") == 0 ? LIBROUTE_ROLE_PREFILL
               : strcmp(role, "decode") == 0 ? LIBROUTE_ROLE_DECODE
               : strcmp(role, "encode") == 0 ? LIBROUTE_ROLE_ENCODE
                                              : LIBROUTE_ROLE_AGGREGATED;
  }
  req.track_prefill_tokens = (uint8_t)jget(req_j, "track_prefill_tokens")->boolean;
  req.conditional_disagg = (uint8_t)jget(req_j, "conditional_disagg")->boolean;
  req.has_tier_matches = (uint8_t)jget(req_j, "has_tier_matches")->boolean;
  req.required_taints = taint_mask(jget(req_j, "required_taints"));
  if (!is_null(jget(req_j, "pin"))) {
    const jval *pin = jget(req_j, "pin");
    req.has_pin = 1;
    req.pin.worker_id = jint(&pin->items[0]);
    req.pin.dp_rank = (uint32_t)jint(&pin->items[1]);
  }
  if (!is_null(jget(req_j, "preferred_taints"))) {
    const jval *p = jget(req_j, "preferred_taints");
    for (i = 0; i < p->len && i < 64; i++) {
      prefs[i].taint = (uint32_t)jint(&p->items[i].items[0]);
      prefs[i].weight = jnum(&p->items[i].items[1]);
    }
    req.preferred_taints = prefs;
    req.preferred_taints_len = p->len;
  }
  if (!is_null(jget(req_j, "shared_hits"))) {
    const jval *h = jget(req_j, "shared_hits");
    for (i = 0; i < h->len && i < 64; i++) {
      hits[i].start = jint(&h->items[i].items[0]);
      hits[i].end = jint(&h->items[i].items[1]);
    }
    req.has_shared_hits = 1;
    req.shared_hits = hits;
    req.shared_hits_len = h->len;
  }
  for (i = 0; i < n; i++) {
    const jval *c = &cands->items[i], *cache = jget(c, "cache"), *load = jget(c, "load");
    rows[i].worker.worker_id = jint(jget(c, "worker"));
    rows[i].worker.dp_rank = (uint32_t)jint(jget(c, "rank"));
    rows[i].taints = taint_mask(jget(c, "taints"));
    if (jget(c, "overloaded")->boolean) rows[i].flags |= LIBROUTE_ROW_OVERLOADED;
    if (!is_null(cache)) {
      rows[i].flags |= LIBROUTE_ROW_HAS_CACHE;
      rows[i].device_blocks = (uint32_t)jint(jget(cache, "device"));
      rows[i].host_blocks = (uint32_t)jint(jget(cache, "host"));
      rows[i].disk_blocks = (uint32_t)jint(jget(cache, "disk"));
      rows[i].effective_blocks = jnum(jget(cache, "effective_blocks"));
      rows[i].effective_tokens = jint(jget(cache, "effective_tokens"));
    }
    if (!is_null(load)) {
      rows[i].flags |= LIBROUTE_ROW_HAS_LOAD;
      rows[i].active_prefill_tokens = jint(jget(load, "active_prefill_tokens"));
      rows[i].active_decode_blocks = jint(jget(load, "active_decode_blocks"));
      rows[i].active_requests = jint(jget(load, "active_requests"));
    }
  }

  rc = libroute_select(policy, selector, &req, rows, n, &sel, NULL, 0);
  {
    const char *got = rc == LIBROUTE_STATUS_OK ? NULL : error_name(rc);
    if ((got == NULL) != (want_error == NULL) || (got && strcmp(got, want_error) != 0))
      MISMATCH("error: expected %s, actual %s", want_error ? want_error : "none", got ? got : "none");
  }
  if (rc != LIBROUTE_STATUS_OK) goto done;

  if (libroute_selector_last_costs(selector, idx, costs, n, &m) != LIBROUTE_STATUS_OK) {
    MISMATCH("libroute_selector_last_costs failed");
    goto done;
  }
  for (i = 0; i < m; i++) {
    by_row[idx[i]] = costs[i];
    present[idx[i]] = 1;
  }
  {
    const jval *bits = jget(expect, "cost_bits");
    for (i = 0; bits && i < bits->len && i < n; i++) {
      const jval *b = &bits->items[i];
      if (is_null(b) != !present[i]) {
        MISMATCH("costs[%zu]: expected %s, actual %s", i, is_null(b) ? "removed" : "a cost", present[i] ? "a cost" : "removed");
      } else if (!is_null(b)) {
        uint64_t want = strtoull(b->str, NULL, 16);
        if (want != bits_of(by_row[i]))
          MISMATCH("cost_bits[%zu]: expected %016llx, actual %016llx", i, (unsigned long long)want,
                   (unsigned long long)bits_of(by_row[i]));
      }
    }
  }
  {
    const jval *argmin = jget(expect, "argmin");
    double low = INFINITY;
    size_t count = 0, matched = 0, k;
    for (i = 0; i < n; i++)
      if (present[i] && by_row[i] < low) low = by_row[i];
    for (i = 0; i < n; i++) {
      if (!present[i] || by_row[i] != low) continue;
      count++;
      for (k = 0; argmin && k < argmin->len; k++)
        if (jint(&argmin->items[k].items[0]) == rows[i].worker.worker_id &&
            jint(&argmin->items[k].items[1]) == rows[i].worker.dp_rank)
          matched++;
    }
    if (argmin && (count != argmin->len || matched != count))
      MISMATCH("argmin: expected %zu workers, actual %zu (%zu in common)", argmin->len, count, matched);
  }
  if (picks) {
    const jval *seq = jget(picks, "sequence");
    char seeded_json[4096];
    size_t seeded_len = 0;
    libroute_policy *seeded = NULL;
    libroute_selector *fresh = NULL;
    jwrite(jget(s, "policy"), seeded_json, sizeof seeded_json, &seeded_len, "seed", "temperature");
    seeded_json[seeded_len - 1] = '\0'; /* drop the closing brace */
    seeded_len--;
    seeded_len += (size_t)snprintf(seeded_json + seeded_len, sizeof seeded_json - seeded_len,
                                   "%s\"seed\":%llu,\"temperature\":%.17g}", seeded_len > 1 ? "," : "",
                                   (unsigned long long)jint(jget(picks, "seed")), jnum(jget(picks, "temperature")));
    if (libroute_policy_new(seeded_json, seeded_len, &seeded) != LIBROUTE_STATUS_OK ||
        libroute_selector_new(LIBROUTE_MAX_CAPACITY, 1, &fresh) != LIBROUTE_STATUS_OK) {
      MISMATCH("picks: cannot build the seeded policy from %s", seeded_json);
    } else {
      for (i = 0; i < seq->len; i++) {
        libroute_selection p;
        if (libroute_select(seeded, fresh, &req, rows, n, &p, NULL, 0) != LIBROUTE_STATUS_OK) {
          MISMATCH("picks[%zu]: selection failed", i);
          break;
        }
        if (p.worker.worker_id != jint(&seq->items[i].items[0]) || p.worker.dp_rank != jint(&seq->items[i].items[1])) {
          MISMATCH("picks.sequence[%zu]: expected %llu/%llu, actual %llu/%u", i,
                   (unsigned long long)jint(&seq->items[i].items[0]), (unsigned long long)jint(&seq->items[i].items[1]),
                   (unsigned long long)p.worker.worker_id, p.worker.dp_rank);
          break;
        }
      }
    }
    libroute_selector_free(fresh);
    libroute_policy_free(seeded);
  }

done:
  libroute_selector_free(selector);
  libroute_policy_free(policy);
  free(rows);
  free(idx);
  free(costs);
  free(by_row);
  free(present);
  return ok;
}

int main(int argc, char **argv) {
  int f, passed = 0, failed = 0;
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE.jsonl...\n", argv[0]);
    return 2;
  }
  for (f = 1; f < argc; f++) {
    FILE *in = fopen(argv[f], "rb");
    char *text;
    long size;
    char *line;
    if (!in) {
      fprintf(stderr, "cannot open %s\n", argv[f]);
      return 2;
    }
    fseek(in, 0, SEEK_END);
    size = ftell(in);
    fseek(in, 0, SEEK_SET);
    text = (char *)malloc((size_t)size + 1);
    if (fread(text, 1, (size_t)size, in) != (size_t)size) {
      fprintf(stderr, "cannot read %s\n", argv[f]);
      return 2;
    }
    text[size] = '\0';
    fclose(in);
    for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
      jreader r;
      jval *s;
      r.p = line;
      r.error = 0;
      s = jparse(&r);
      if (r.error) {
        fprintf(stderr, "%s: unreadable scenario\n", argv[f]);
        return 2;
      }
      if (run_scenario(s)) passed++;
      else failed++;
      jfree_children(s);
      free(s);
    }
    free(text);
  }
  g_mismatches = failed;
  printf("%d passed, %d failed\n", passed, failed);
  return g_mismatches == 0 ? 0 : 1;
}
