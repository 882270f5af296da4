// Background threads that must not take a core from a request when they wake.
//
// A thread that sleeps on a timer (a writer that lingers to gather work) wakes on the
// core where it slept. Linux's scheduler then lets it preempt whatever runs there,
// often a gRPC thread halfway through a call, because a sleeper is owed CPU time. On two
// cores that puts the background thread's work on the call's path: measured on the
// sidecar at 1 in flight, its audit writer preempted a request's thread on one call in
// five, for about 50 µs each time.
//
// AsBatchThread marks the calling thread as batch work (SCHED_BATCH): it keeps its
// share of the CPU under load, but waking it never preempts a running thread; it runs
// when a core is free or at the next scheduler tick. Elsewhere than Linux it does
// nothing and says so.
#ifndef EONCE_COMMON_BASE_THREAD_CLASS_H_
#define EONCE_COMMON_BASE_THREAD_CLASS_H_

#include "absl/status/status.h"

namespace eonce {

// For the calling thread only. FAILED_PRECONDITION where the platform has no such class.
absl::Status AsBatchThread();

// Whether the calling thread runs as batch work.
bool IsBatchThread();

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_THREAD_CLASS_H_
