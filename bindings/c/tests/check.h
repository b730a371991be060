/* The tiny test harness the C tests share: counters, CHECK and EXPECT_STATUS, and the closing
 * "N passed, N failed" line. Include it once per test program. */

#ifndef LIBROUTE_TEST_CHECK_H
#define LIBROUTE_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond, what)                                     \
  do {                                                        \
    if (cond) {                                               \
      passed++;                                               \
    } else {                                                  \
      failed++;                                               \
      printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, what); \
    }                                                         \
  } while (0)

#define EXPECT_STATUS(call, status) CHECK((call) == (status), #call " == " #status)

/* Prints the closing line and returns the process exit code. */
static int finish(void) {
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

#endif
