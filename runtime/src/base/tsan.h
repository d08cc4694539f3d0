// Happens-before annotations for ThreadSanitizer, for hand-offs through libraries it cannot see
// into (Debian's pthreadpool is not instrumented). No-ops in every other build.
#ifndef FFLITE_RUNTIME_SRC_BASE_TSAN_H_
#define FFLITE_RUNTIME_SRC_BASE_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#define FFLITE_HAS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FFLITE_HAS_TSAN 1
#endif
#endif

#ifdef FFLITE_HAS_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
// Everything this thread wrote before FFLITE_TSAN_RELEASE(p) happens before what another thread
// does after FFLITE_TSAN_ACQUIRE(p).
#define FFLITE_TSAN_RELEASE(p) __tsan_release(p)
#define FFLITE_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define FFLITE_TSAN_RELEASE(p) ((void)(p))
#define FFLITE_TSAN_ACQUIRE(p) ((void)(p))
#endif

#endif  // FFLITE_RUNTIME_SRC_BASE_TSAN_H_
