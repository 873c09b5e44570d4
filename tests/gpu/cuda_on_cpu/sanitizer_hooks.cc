// CUDA-on-CPU: the sanitizers' hooks. Every AddressSanitizer and
// ThreadSanitizer report ends with a one-line summary passed to
// __sanitizer_report_error_summary, every UndefinedBehaviorSanitizer report
// calls __ubsan_on_report; the layer prints the summary as the default does
// and, when a CUDA thread made the report, makes it that kernel launch's
// error (executor.cc), so that the self-test names the case. The
// default options let a run go on after a report (each build compiles with
// -fsanitize-recover where needed), and a program that saw reports outside
// any kernel exits with status 1.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/gpu/cuda_on_cpu/executor.h"

namespace {

void ExitIfHostReports() {
  const int n = cuda_on_cpu::HostSanitizerReports();
  if (n > 0) {
    std::fprintf(stderr,
                 "CUDA-on-CPU: %d sanitizer report(s) outside the kernels "
                 "(see above): exit status 1\n",
                 n);
    std::fflush(nullptr);
    _exit(1);
  }
}

// Registered at start-up: atexit from inside a report could take locks the
// report holds.
const bool g_registered = (std::atexit(ExitIfHostReports), true);

}  // namespace

extern "C" {

void __sanitizer_report_error_summary(const char* summary) {
  // As the default: the line on stderr (write(2): no locks inside a report).
  if (write(2, summary, std::strlen(summary)) < 0 || write(2, "\n", 1) < 0) {
  }
  cuda_on_cpu::NoteSanitizerReport(summary);
}

// UndefinedBehaviorSanitizer (GCC's libubsan) prints no summary line; its
// monitor hook is called for each report, whose details it hands out.
extern "C" void __ubsan_get_current_report_data(
    const char** kind, const char** message, const char** file,
    unsigned* line, unsigned* column, char** address) __attribute__((weak));

void __ubsan_on_report() {
  if (__ubsan_get_current_report_data == nullptr) return;
  const char *kind = "", *message = "", *file = "";
  unsigned line = 0, column = 0;
  char* address = nullptr;
  __ubsan_get_current_report_data(&kind, &message, &file, &line, &column,
                                  &address);
  char summary[640];
  std::snprintf(summary, sizeof(summary),
                "UndefinedBehaviorSanitizer: %s: %s at %s:%u", kind, message,
                cuda_on_cpu::ShortPath(file), line);
  cuda_on_cpu::NoteSanitizerReport(summary);
}

// Go on after a report: the next kernel launch is the one that fails.
const char* __asan_default_options() {
  return "halt_on_error=0:detect_leaks=1:allow_user_segv_handler=1:"
         "detect_stack_use_after_return=0";
}
const char* __ubsan_default_options() {
  return "halt_on_error=0:print_stacktrace=1:report_error_type=1";
}
const char* __tsan_default_options() {
  // exitcode=0: the program says what failed (a report in a kernel fails
  // its launch; one elsewhere makes the exit status 1).
  return "halt_on_error=0:report_signal_unsafe=0:history_size=4:exitcode=0";
}

}  // extern "C"
