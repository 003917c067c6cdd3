// ringserve_shm: POSIX shared memory handed to JavaScript as a real SharedArrayBuffer, and futex
// wait/wake that reach across processes (V8's Atomics.wait/notify only reach threads of one process).
//
// Why V8 and node.h directly rather than Node-API: Node-API has no external SharedArrayBuffer.
// napi_create_external_arraybuffer makes a plain ArrayBuffer (Atomics.wait refuses it, and
// postMessage to a worker thread copies it); no napi_* call wraps foreign memory in a
// SharedArrayBuffer. v8::SharedArrayBuffer::NewBackingStore with a deleter does. The price: the
// addon is tied to one Node ABI (NODE_MODULE_VERSION) and is rebuilt for each Node major.
//
// Documented Node/V8 addon APIs only: a context-aware module (NODE_MODULE_INIT, so it loads in worker
// threads), v8::SharedArrayBuffer::NewBackingStore over the mmap'ed bytes (no copy; the deleter
// munmaps once the last JS reference is gone), node::Buffer::Data to reach an Int32Array's bytes.
// Errors are plain JS Errors with a stable `code` (RS_ERR_SHM_*, registered in src/errors.ts, whose
// toRingserveError maps them) and the errno text, from the thread-safe strerror_r, in the message.

#if !defined(__linux__)
#error "ringserve_shm needs Linux (shm_open + futex); RS_ERR_ADDON_BUILD: unsupported OS"
#endif

#include <node.h>
#include <node_buffer.h>
#include <node_version.h>
#include <v8.h>

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <utility>

#if NODE_MAJOR_VERSION < 20
#error "ringserve_shm needs Node.js 20 or newer"
#endif

#ifdef V8_ENABLE_SANDBOX
// With V8's sandbox, array buffers must live inside the sandbox and external memory is refused.
#error "ringserve_shm cannot hand mmap'ed memory to a V8 built with the sandbox enabled"
#endif

namespace ringserve_shm {

using v8::Context;
using v8::Exception;
using v8::FunctionCallbackInfo;
using v8::Int32Array;
using v8::Integer;
using v8::Isolate;
using v8::Local;
using v8::Number;
using v8::Object;
using v8::SharedArrayBuffer;
using v8::String;
using v8::Value;

constexpr int kMaxNameLength = 200;
// Number.MAX_SAFE_INTEGER: the largest byte count a JS number names exactly, and V8's own limit on
// an ArrayBuffer's length on 64-bit hosts (v8::ArrayBuffer::kMaxByteLength from V8 12 on).
constexpr double kMaxRegionBytes = 9007199254740991.0;

static_assert(sizeof(size_t) >= 8 && sizeof(off_t) >= 8,
              "ringserve_shm needs a 64-bit size_t and off_t (regions can pass 2 GiB)");

// strerror_r comes in two shapes: XSI (returns int, fills buf) and GNU (returns a char* that may or
// may not point into buf; glibc under g++, which defines _GNU_SOURCE). Overloads read either one.
[[maybe_unused]] const char* StrerrorText(int rc, const char* buf) {
  return rc == 0 ? buf : "unknown error";
}
[[maybe_unused]] const char* StrerrorText(const char* text, const char* /*buf*/) {
  return text != nullptr ? text : "unknown error";
}

std::string ErrnoText(int err_no) {
  char buf[256] = {};
  return StrerrorText(strerror_r(err_no, buf, sizeof(buf)), buf);
}

// Throws `new Error("<code>: <message>")` with `err.code = code` (and `err.errno` when non-zero).
// A failed Set means V8 is already unwinding (a worker being terminated); the error goes as it is.
void ThrowCoded(Isolate* isolate, const char* code, const std::string& message, int err_no) {
  Local<Context> context = isolate->GetCurrentContext();
  std::string text = std::string(code) + ": " + message;
  if (err_no != 0) text += " (" + ErrnoText(err_no) + ")";
  Local<String> js_text;
  if (!String::NewFromUtf8(isolate, text.c_str()).ToLocal(&js_text)) {
    js_text = String::NewFromUtf8Literal(isolate, "ringserve_shm: error text too long");
  }
  Local<Value> error = Exception::Error(js_text);
  Local<Object> object = error.As<Object>();
  Local<String> js_code;
  bool ok = String::NewFromUtf8(isolate, code).ToLocal(&js_code) &&
            object->Set(context, String::NewFromUtf8Literal(isolate, "code"), js_code)
                .FromMaybe(false);
  if (ok && err_no != 0) {
    Local<String> key = String::NewFromUtf8Literal(isolate, "errno");
    static_cast<void>(object->Set(context, key, Integer::New(isolate, err_no)).FromMaybe(false));
  }
  isolate->ThrowException(error);
}

// Region names are "/<name>" for shm_open; restricting the alphabet keeps them valid file names in
// /dev/shm and keeps a caller from escaping it with '/' or "..".
bool ReadName(const FunctionCallbackInfo<Value>& info, std::string* path) {
  Isolate* isolate = info.GetIsolate();
  if (info.Length() < 1 || !info[0]->IsString()) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_NAME", "region name must be a string", 0);
    return false;
  }
  // Length in UTF-16 units, checked before the conversion so a huge string is never copied.
  int length = info[0].As<String>()->Length();
  if (length < 1 || length > kMaxNameLength) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_NAME",
               "region name of " + std::to_string(length) + " characters must have 1-200", 0);
    return false;
  }
  String::Utf8Value utf8(isolate, info[0]);
  if (*utf8 == nullptr) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_NAME", "region name cannot be read as UTF-8", 0);
    return false;
  }
  std::string name(*utf8, static_cast<size_t>(utf8.length()));
  bool ok = name != "." && name != "..";
  for (char c : name) {
    bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_' || c == '.';
    ok = ok && allowed;
  }
  if (!ok) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_NAME",
               "region name '" + name + "' must be 1-200 characters of [A-Za-z0-9._-]", 0);
    return false;
  }
  *path = "/" + name;
  return true;
}

// V8's deleter, run once the last JS reference to the buffer is gone. munmap fails only for an
// address range that is not a mapping, which this one always is; there is nobody to report to.
void UnmapRegion(void* data, size_t length, void* /*deleter_data*/) {
  static_cast<void>(munmap(data, length));
}

// Maps fd and returns it as a SharedArrayBuffer; on failure throws and returns false.
bool MapAsSharedArrayBuffer(Isolate* isolate, int fd, size_t bytes, const std::string& path,
                            Local<SharedArrayBuffer>* out) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    int e = errno;  // read before building the message: allocation may change errno
    ThrowCoded(isolate, "RS_ERR_SHM_MMAP",
               "mmap of " + path + " (" + std::to_string(bytes) + " bytes) failed", e);
    return false;
  }
  std::unique_ptr<v8::BackingStore> store =
      SharedArrayBuffer::NewBackingStore(data, bytes, UnmapRegion, nullptr);
  *out = SharedArrayBuffer::New(isolate, std::move(store));
  return true;
}

// create(name, bytes): a new region (fails if it exists), zero-filled, its pages reserved up front
// so that a too-small /dev/shm is an error now rather than a SIGBUS on first touch later.
void Create(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  std::string path;
  if (!ReadName(info, &path)) return;
  double requested = info.Length() > 1 && info[1]->IsNumber() ? info[1].As<Number>()->Value() : -1;
  // NaN fails every comparison, so it is refused here, before any cast to an integer type.
  if (!(requested >= 1 && requested <= kMaxRegionBytes) || std::floor(requested) != requested) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "region size must be a positive integer number of bytes", 0);
    return;
  }
  size_t bytes = static_cast<size_t>(requested);
  int fd = shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    int e = errno;
    ThrowCoded(isolate, e == EEXIST ? "RS_ERR_SHM_EXISTS" : "RS_ERR_SHM_OPEN",
               "shm_open(" + path + ", O_CREAT|O_EXCL) failed", e);
    return;
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(path.c_str());
    ThrowCoded(isolate, "RS_ERR_SHM_OPEN", "ftruncate(" + path + ") failed", e);
    return;
  }
  int fallocate_error = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (fallocate_error != 0 && fallocate_error != EOPNOTSUPP && fallocate_error != EINVAL) {
    close(fd);
    shm_unlink(path.c_str());
    ThrowCoded(isolate, "RS_ERR_SHM_NO_SPACE",
               "cannot reserve " + std::to_string(bytes) + " bytes for " + path + " in /dev/shm",
               fallocate_error);
    return;
  }
  Local<SharedArrayBuffer> sab;
  bool mapped = MapAsSharedArrayBuffer(isolate, fd, bytes, path, &sab);
  close(fd);  // the mapping keeps the object alive
  if (!mapped) {
    shm_unlink(path.c_str());
    return;
  }
  info.GetReturnValue().Set(sab);
}

// open(name): maps an existing region whole; its size comes from fstat.
void Open(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  std::string path;
  if (!ReadName(info, &path)) return;
  int fd = shm_open(path.c_str(), O_RDWR, 0);
  if (fd < 0) {
    int e = errno;
    ThrowCoded(isolate, e == ENOENT ? "RS_ERR_SHM_NOT_FOUND" : "RS_ERR_SHM_OPEN",
               "shm_open(" + path + ") failed", e);
    return;
  }
  struct stat st = {};
  if (fstat(fd, &st) != 0) {
    int e = errno;  // st is not read: it holds nothing when fstat failed
    close(fd);
    ThrowCoded(isolate, "RS_ERR_SHM_OPEN", "fstat(" + path + ") failed", e);
    return;
  }
  if (st.st_size <= 0 || static_cast<double>(st.st_size) > kMaxRegionBytes) {
    close(fd);
    ThrowCoded(isolate, "RS_ERR_SHM_OPEN",
               "region " + path + " has " + std::to_string(st.st_size) +
                   " bytes (a region has 1 to 2^53-1)",
               0);
    return;
  }
  Local<SharedArrayBuffer> sab;
  bool mapped = MapAsSharedArrayBuffer(isolate, fd, static_cast<size_t>(st.st_size), path, &sab);
  close(fd);
  if (mapped) info.GetReturnValue().Set(sab);
}

// unlink(name) -> true if removed, false if it did not exist. Mappings stay valid until unmapped.
void Unlink(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  std::string path;
  if (!ReadName(info, &path)) return;
  if (shm_unlink(path.c_str()) == 0) {
    info.GetReturnValue().Set(true);
    return;
  }
  int e = errno;
  if (e == ENOENT) {
    info.GetReturnValue().Set(false);
    return;
  }
  ThrowCoded(isolate, "RS_ERR_SHM_UNLINK", "shm_unlink(" + path + ") failed", e);
}

// Resolves (int32array, index) to the address of that element; throws on a bad argument.
int32_t* ReadFutexWord(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  if (info.Length() < 2 || !info[0]->IsInt32Array() || !info[1]->IsNumber()) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "expected (Int32Array, index, ...)", 0);
    return nullptr;
  }
  Local<Int32Array> array = info[0].As<Int32Array>();
  double index = info[1].As<Number>()->Value();
  if (!(index >= 0 && index < static_cast<double>(array->Length())) ||
      std::floor(index) != index) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "futex index out of range", 0);
    return nullptr;
  }
  char* base = node::Buffer::Data(info[0]);
  return reinterpret_cast<int32_t*>(base) + static_cast<size_t>(index);
}

// CLOCK_MONOTONIC always exists on Linux and `now` is valid, so clock_gettime cannot fail here.
double MonotonicMs() {
  timespec now = {};
  static_cast<void>(clock_gettime(CLOCK_MONOTONIC, &now));
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// futexWait(int32array, index, expected, timeoutMs) -> 0 woken, 1 value was not `expected`,
// 2 timed out. Shared (non-PRIVATE) futex, so a waker in another process reaches it. A signal
// (EINTR) resumes the wait with what is left of the bound.
void FutexWait(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  int32_t* word = ReadFutexWord(info);
  if (word == nullptr) return;
  if (info.Length() < 4 || !info[2]->IsNumber() || !info[3]->IsNumber()) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "expected (Int32Array, index, expected, timeoutMs)", 0);
    return;
  }
  // ToInt32, as Atomics.wait reads its `expected` (NaN is 0); a Number cannot throw on the way.
  int32_t expected = info[2]->Int32Value(isolate->GetCurrentContext()).FromMaybe(0);
  double timeout_ms = info[3].As<Number>()->Value();
  if (!(timeout_ms >= 0 && timeout_ms <= 2147483647.0)) {  // refuses NaN too
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "futex timeout must be a finite number of ms >= 0", 0);
    return;
  }
  double deadline = MonotonicMs() + timeout_ms;
  for (;;) {
    double remaining = deadline - MonotonicMs();
    if (!(remaining > 0)) remaining = 0;
    // Whole nanoseconds first, then split: tv_nsec stays in [0, 1e9), which FUTEX_WAIT requires
    // (a rounded double split could reach 1e9 and get EINVAL). 2^31 ms is 2.1e15 ns: fits int64.
    int64_t remaining_ns = static_cast<int64_t>(remaining * 1e6);
    timespec relative;
    relative.tv_sec = static_cast<time_t>(remaining_ns / 1000000000);
    relative.tv_nsec = static_cast<long>(remaining_ns % 1000000000);
    long rc = syscall(SYS_futex, word, FUTEX_WAIT, expected, &relative, nullptr, 0);
    if (rc == 0) {
      info.GetReturnValue().Set(0);
      return;
    }
    int e = errno;
    if (e == EAGAIN) {
      info.GetReturnValue().Set(1);
      return;
    }
    if (e == ETIMEDOUT) {
      info.GetReturnValue().Set(2);
      return;
    }
    if (e != EINTR) {
      ThrowCoded(isolate, "RS_ERR_SHM_FUTEX", "futex wait failed", e);
      return;
    }
  }
}

// futexWake(int32array, index, count) -> number of waiters woken (in any process).
void FutexWake(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  int32_t* word = ReadFutexWord(info);
  if (word == nullptr) return;
  if (info.Length() < 3 || !info[2]->IsNumber()) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "expected (Int32Array, index, count)", 0);
    return;
  }
  double requested = info[2].As<Number>()->Value();
  // NaN would make the cast below undefined behaviour: refused here, while it is still a double.
  if (std::isnan(requested)) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "futex wake count must be a number, not NaN", 0);
    return;
  }
  // At least one; Infinity and anything past INT_MAX mean "all".
  int count = requested >= static_cast<double>(INT_MAX) ? INT_MAX
              : requested < 1                           ? 1
                                                        : static_cast<int>(requested);
  long rc = syscall(SYS_futex, word, FUTEX_WAKE, count, nullptr, nullptr, 0);
  if (rc < 0) {
    int e = errno;
    ThrowCoded(isolate, "RS_ERR_SHM_FUTEX", "futex wake failed", e);
    return;
  }
  info.GetReturnValue().Set(static_cast<int32_t>(rc));
}

// False when V8 refused (an exception is then pending, and require() throws it).
bool Export(Local<Context> context, Local<Object> exports, const char* name,
            v8::FunctionCallback callback) {
  Isolate* isolate = Isolate::GetCurrent();  // Context::GetIsolate is deprecated in newer V8
  Local<v8::Function> fn;
  Local<String> key;
  if (!v8::Function::New(context, callback).ToLocal(&fn) ||
      !String::NewFromUtf8(isolate, name).ToLocal(&key)) {
    return false;
  }
  fn->SetName(key);
  return exports->Set(context, key, fn).FromMaybe(false);
}

}  // namespace ringserve_shm

// ---- Thread scheduling and releasable memory --------------------------------------------------
// A self-contained block: what the API server's helper threads need from the kernel beyond the
// region. On Linux, nice and the scheduling policy are per thread (a thread id is a valid
// PRIO_PROCESS target), so a worker thread can lower its own priority without touching the main
// thread's. Reserved memory is private anonymous memory handed out as a SharedArrayBuffer (threads
// of one process share it; MAP_PRIVATE only matters across fork): pages are committed on first
// touch, and discard() gives the pages of a range back to the kernel (MADV_DONTNEED; they read as
// zeros afterwards), which a buffer from `new SharedArrayBuffer` cannot do. arrayBufferOf() lets
// the main thread hand such memory to APIs that only take ArrayBuffer-backed Buffers.

#include <sched.h>
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

namespace ringserve_shm {
namespace thread_and_memory {

pid_t ThisThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// threadId() -> the calling thread's kernel id (gettid).
void ThreadId(const FunctionCallbackInfo<Value>& info) {
  info.GetReturnValue().Set(static_cast<int32_t>(ThisThreadId()));
}

// threadNice() -> the calling thread's nice value.
void ThreadNice(const FunctionCallbackInfo<Value>& info) {
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(ThisThreadId()));
  if (nice == -1 && errno != 0) {
    ThrowCoded(info.GetIsolate(), "RS_ERR_SHM_PRIORITY", "getpriority of this thread failed", errno);
    return;
  }
  info.GetReturnValue().Set(nice);
}

// setThreadNice(nice): the calling thread's nice value, -20..19. Lowering the priority (a larger
// nice) needs no privilege; raising it past RLIMIT_NICE is EACCES.
void SetThreadNice(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  double nice = info.Length() > 0 && info[0]->IsNumber() ? info[0].As<Number>()->Value() : NAN;
  if (!(nice >= -20 && nice <= 19) || std::floor(nice) != nice) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "nice must be an integer in [-20, 19]", 0);
    return;
  }
  pid_t tid = ThisThreadId();
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), static_cast<int>(nice)) != 0) {
    ThrowCoded(isolate, "RS_ERR_SHM_PRIORITY",
               "setpriority(thread " + std::to_string(tid) + ", nice " +
                   std::to_string(static_cast<int>(nice)) + ") failed",
               errno);
  }
}

struct PolicyName {
  const char* name;
  int policy;
};
constexpr PolicyName kPolicies[] = {
    {"other", SCHED_OTHER}, {"batch", SCHED_BATCH}, {"idle", SCHED_IDLE},
    {"fifo", SCHED_FIFO},   {"rr", SCHED_RR},
};

// threadSchedPolicy() -> 'other' | 'batch' | 'idle' | 'fifo' | 'rr' for the calling thread.
void ThreadSchedPolicy(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  int policy = sched_getscheduler(ThisThreadId());
  if (policy < 0) {
    ThrowCoded(isolate, "RS_ERR_SHM_PRIORITY", "sched_getscheduler of this thread failed", errno);
    return;
  }
  policy &= ~SCHED_RESET_ON_FORK;
  for (const PolicyName& p : kPolicies) {
    if (p.policy == policy) {
      info.GetReturnValue().Set(String::NewFromUtf8(isolate, p.name).ToLocalChecked());
      return;
    }
  }
  info.GetReturnValue().Set(String::NewFromUtf8(isolate, "unknown").ToLocalChecked());
}

// setThreadSchedPolicy('other' | 'batch' | 'idle'): the calling thread's time-sharing policy
// (the real-time ones need privileges and are not offered). SCHED_BATCH keeps the nice weight but
// never preempts on wake-up; SCHED_IDLE runs only on a core nothing else wants.
void SetThreadSchedPolicy(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  std::string name;
  if (info.Length() > 0 && info[0]->IsString()) {
    String::Utf8Value utf8(isolate, info[0]);
    name.assign(*utf8, utf8.length());
  }
  int policy = name == "other" ? SCHED_OTHER
               : name == "batch" ? SCHED_BATCH
               : name == "idle"  ? SCHED_IDLE
                                 : -1;
  if (policy < 0) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "policy must be 'other', 'batch' or 'idle'", 0);
    return;
  }
  sched_param param{};
  param.sched_priority = 0;
  pid_t tid = ThisThreadId();
  if (sched_setscheduler(tid, policy, &param) != 0) {
    ThrowCoded(isolate, "RS_ERR_SHM_PRIORITY",
               "sched_setscheduler(thread " + std::to_string(tid) + ", " + name + ") failed", errno);
  }
}

// Reserved mappings by start address -> length, so discard() only ever touches memory reserve()
// made (any thread may free a buffer: V8 runs the deleter where the last reference died).
std::mutex reserved_mutex;
std::map<uintptr_t, size_t>& Reserved() {
  static std::map<uintptr_t, size_t> reserved;
  return reserved;
}

void UnmapReserved(void* data, size_t length, void* /*deleter_data*/) {
  {
    std::lock_guard<std::mutex> lock(reserved_mutex);
    Reserved().erase(reinterpret_cast<uintptr_t>(data));
  }
  munmap(data, length);
}

// reserve(bytes) -> a SharedArrayBuffer of `bytes` whose pages are committed on first touch
// (MAP_NORESERVE: a large reservation costs address space, not memory).
void Reserve(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  double requested = info.Length() > 0 && info[0]->IsNumber() ? info[0].As<Number>()->Value() : -1;
  if (!(requested >= 1 && requested <= 9007199254740991.0) || std::floor(requested) != requested) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "reservation size must be a positive integer number of bytes", 0);
    return;
  }
  size_t bytes = static_cast<size_t>(requested);
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (data == MAP_FAILED) {
    ThrowCoded(isolate, "RS_ERR_SHM_MMAP",
               "reserving " + std::to_string(bytes) + " bytes of anonymous memory failed", errno);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(reserved_mutex);
    Reserved()[reinterpret_cast<uintptr_t>(data)] = bytes;
  }
  std::unique_ptr<v8::BackingStore> store =
      SharedArrayBuffer::NewBackingStore(data, bytes, UnmapReserved, nullptr);
  info.GetReturnValue().Set(SharedArrayBuffer::New(isolate, std::move(store)));
}

// discard(sab, offset, length) -> bytes given back: the whole pages inside [offset, offset +
// length) of a reserve()d buffer. Their contents read as zeros afterwards.
void Discard(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  if (info.Length() < 3 || !info[0]->IsSharedArrayBuffer() || !info[1]->IsNumber() ||
      !info[2]->IsNumber()) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "expected (SharedArrayBuffer, offset, length)", 0);
    return;
  }
  std::shared_ptr<v8::BackingStore> store = info[0].As<SharedArrayBuffer>()->GetBackingStore();
  uintptr_t base = reinterpret_cast<uintptr_t>(store->Data());
  bool reserved = false;
  {
    std::lock_guard<std::mutex> lock(reserved_mutex);
    auto it = Reserved().find(base);
    reserved = it != Reserved().end() && it->second == store->ByteLength();
  }
  if (!reserved) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "discard() needs a buffer made by reserve()", 0);
    return;
  }
  double offset = info[1].As<Number>()->Value();
  double length = info[2].As<Number>()->Value();
  double size = static_cast<double>(store->ByteLength());
  if (!(offset >= 0 && length >= 0 && offset + length <= size) || std::floor(offset) != offset ||
      std::floor(length) != length) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "discard range outside the buffer", 0);
    return;
  }
  uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t from = (base + static_cast<uintptr_t>(offset) + page - 1) & ~(page - 1);
  uintptr_t to = (base + static_cast<uintptr_t>(offset + length)) & ~(page - 1);
  if (to <= from) {
    info.GetReturnValue().Set(0);
    return;
  }
  if (madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED) != 0) {
    ThrowCoded(isolate, "RS_ERR_SHM_MMAP", "madvise(MADV_DONTNEED) failed", errno);
    return;
  }
  info.GetReturnValue().Set(static_cast<double>(to - from));
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// populate(sab, offset, length) -> bytes mapped: maps the whole pages inside [offset, offset +
// length) of any SharedArrayBuffer into this process now (MADV_POPULATE_WRITE), instead of one page
// fault at a time on first touch. For the region, whose pages the creator reserved up front
// (posix_fallocate), it allocates nothing: the process's RSS shows at once the shared memory it
// uses, rather than creeping up as a ring's write position first reaches each page, and no hot
// path takes those faults. Kernels before 5.14 refuse the advice; then each page is read once.
void Populate(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  if (info.Length() < 3 || !info[0]->IsSharedArrayBuffer() || !info[1]->IsNumber() ||
      !info[2]->IsNumber()) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "expected (SharedArrayBuffer, offset, length)", 0);
    return;
  }
  std::shared_ptr<v8::BackingStore> store = info[0].As<SharedArrayBuffer>()->GetBackingStore();
  double offset = info[1].As<Number>()->Value();
  double length = info[2].As<Number>()->Value();
  double size = static_cast<double>(store->ByteLength());
  if (!(offset >= 0 && length >= 0 && offset + length <= size) || std::floor(offset) != offset ||
      std::floor(length) != length) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "populate range outside the buffer", 0);
    return;
  }
  uintptr_t base = reinterpret_cast<uintptr_t>(store->Data());
  uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // Whole pages inside the range only: a page that is partly outside the buffer may not be ours.
  uintptr_t from = (base + static_cast<uintptr_t>(offset) + page - 1) & ~(page - 1);
  uintptr_t to = (base + static_cast<uintptr_t>(offset + length)) & ~(page - 1);
  if (to <= from) {
    info.GetReturnValue().Set(0);
    return;
  }
  if (madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) != 0) {
    if (errno != EINVAL) {
      ThrowCoded(isolate, "RS_ERR_SHM_MMAP", "madvise(MADV_POPULATE_WRITE) failed", errno);
      return;
    }
    // An older kernel: one read per page maps it (the page exists; nothing is written).
    uint8_t sum = 0;
    for (uintptr_t p = from; p < to; p += page) sum ^= *reinterpret_cast<volatile uint8_t*>(p);
    static_cast<void>(sum);
  }
  info.GetReturnValue().Set(static_cast<double>(to - from));
}

// An ArrayBuffer that aliases a SharedArrayBuffer's memory keeps that memory alive (the deleter
// drops a reference to the SAB's backing store, on whatever thread V8 frees it).
struct AliasedStore {
  std::shared_ptr<v8::BackingStore> store;
};

void DropAliasedStore(void* /*data*/, size_t /*length*/, void* holder) {
  delete static_cast<AliasedStore*>(holder);
}

// arrayBufferOf(sab) -> an ArrayBuffer over the same bytes as `sab` (no copy), for APIs that take
// only ArrayBuffer-backed views (fastify sends a Buffer raw only if its .buffer is an ArrayBuffer).
// V8 counts its length as external memory once, when it is made. (Mark it untransferable from JS:
// a transfer would detach it under every other view; a V8 detach key makes Node 20 abort instead.)
void ArrayBufferOf(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  if (info.Length() < 1 || !info[0]->IsSharedArrayBuffer()) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "expected a SharedArrayBuffer", 0);
    return;
  }
  std::shared_ptr<v8::BackingStore> shared = info[0].As<SharedArrayBuffer>()->GetBackingStore();
  void* data = shared->Data();
  size_t length = shared->ByteLength();
  auto* holder = new AliasedStore{std::move(shared)};
  std::unique_ptr<v8::BackingStore> alias =
      v8::ArrayBuffer::NewBackingStore(data, length, DropAliasedStore, holder);
  info.GetReturnValue().Set(v8::ArrayBuffer::New(isolate, std::move(alias)));
}

// The malloc trimmer: one thread per process that calls malloc_trim(0) every interval. It keeps the
// priority of the thread that started it (the main thread's), not a lower one: a SIGKILLed process
// is gone, its sockets closed and its parent told, only once every thread has run its exit, and a
// nice-19 thread on busy cores ran its exit tens of ms late (a killed node's listener kept taking
// connections it then reset). The trim itself is short and rare.
// glibc's malloc keeps freed memory in its arenas (one per thread that allocated, up to 8 per core)
// and gives it back only from the top of the main heap; in a long-lived server the freed chunks in
// the middle of the arenas (libuv's and V8's native allocations, worker threads' buffers) stay
// resident, so RSS creeps up to the highest fragmentation it ever saw. malloc_trim(0) walks every
// arena and gives back (MADV_DONTNEED) each whole free page. It takes each arena's lock in turn
// while it walks it, so a thread that allocates from that arena at that moment waits for the walk
// of that arena. Other allocators (musl) have no such call; there the trimmer does not start.
std::atomic<bool> trimmer_started{false};
// Written by the trimmer thread only; read by any.
std::atomic<uint64_t> trims{0};
std::atomic<uint64_t> trims_released{0};

// startMallocTrimmer(intervalMs) -> 'started' if this call started the process's trimmer,
// 'running' if it already runs (any thread of the process may call it; one trimmer serves them
// all), 'unsupported' where the C library has no malloc_trim. Throws RS_ERR_SHM_BAD_ARGUMENT for an
// interval outside [10 ms, 1 day].
void StartMallocTrimmer(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  double interval = info.Length() > 0 && info[0]->IsNumber() ? info[0].As<Number>()->Value() : NAN;
  if (!(interval >= 10 && interval <= 86400000) || std::floor(interval) != interval) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "interval must be an integer in [10, 86400000] ms", 0);
    return;
  }
#ifdef __GLIBC__
  bool expected = false;
  if (!trimmer_started.compare_exchange_strong(expected, true)) {
    info.GetReturnValue().Set(String::NewFromUtf8(isolate, "running").ToLocalChecked());
    return;
  }
  auto period = std::chrono::milliseconds(static_cast<int64_t>(interval));
  std::thread([period] {
    for (;;) {
      std::this_thread::sleep_for(period);
      bool released = malloc_trim(0) != 0;
      trims.fetch_add(1, std::memory_order_relaxed);
      if (released) trims_released.fetch_add(1, std::memory_order_relaxed);
    }
  }).detach();
  info.GetReturnValue().Set(String::NewFromUtf8(isolate, "started").ToLocalChecked());
#else
  info.GetReturnValue().Set(String::NewFromUtf8(isolate, "unsupported").ToLocalChecked());
#endif
}

// mallocTrims() -> [trims done, trims that gave memory back] by this process's trimmer.
void MallocTrims(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  Local<v8::Array> out = v8::Array::New(isolate, 2);
  Local<Context> context = isolate->GetCurrentContext();
  static_cast<void>(out->Set(context, 0, Number::New(isolate, static_cast<double>(trims.load()))));
  static_cast<void>(
      out->Set(context, 1, Number::New(isolate, static_cast<double>(trims_released.load()))));
  info.GetReturnValue().Set(out);
}

// trimMalloc() -> true if malloc_trim(0) gave memory back now (on the calling thread; the trimmer
// above does the same on its own schedule); false where the C library has no malloc_trim.
void TrimMalloc(const FunctionCallbackInfo<Value>& info) {
#ifdef __GLIBC__
  info.GetReturnValue().Set(malloc_trim(0) != 0);
#else
  info.GetReturnValue().Set(false);
#endif
}

// mallocInfo() -> glibc's malloc_info(3) XML: for each arena, the memory it has from the system
// and what of it is free (in fast bins, in the other bins and the top chunk), then the mmapped
// chunks; '' where the C library has none. What an arena holds minus what it has free is what is
// allocated from it, which tells a leak from fragmentation that malloc_trim cannot give back.
void MallocInfo(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  std::string text;
#ifdef __GLIBC__
  char* buffer = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&buffer, &size);
  if (stream != nullptr) {
    malloc_info(0, stream);
    fclose(stream);
    if (buffer != nullptr) text.assign(buffer, size);
    free(buffer);
  }
#endif
  Local<String> out;
  if (!String::NewFromUtf8(isolate, text.data(), v8::NewStringType::kNormal,
                           static_cast<int>(text.size()))
           .ToLocal(&out)) {
    out = String::Empty(isolate);
  }
  info.GetReturnValue().Set(out);
}

// collectGarbage(): V8's LowMemoryNotification on the calling thread's isolate: full collections
// until one frees nothing more (weak references and finalizers included), compacting, then its
// free pages handed back to the system. The pause grows with the heap (tens of ms for an API
// server's main thread at rest): for a process at rest.
void CollectGarbage(const FunctionCallbackInfo<Value>& info) {
  info.GetIsolate()->LowMemoryNotification();
}

void Register(Local<Context> context, Local<Object> exports) {
  Export(context, exports, "threadId", ThreadId);
  Export(context, exports, "startMallocTrimmer", StartMallocTrimmer);
  Export(context, exports, "mallocTrims", MallocTrims);
  Export(context, exports, "trimMalloc", TrimMalloc);
  Export(context, exports, "collectGarbage", CollectGarbage);
  Export(context, exports, "mallocInfo", MallocInfo);
  Export(context, exports, "threadNice", ThreadNice);
  Export(context, exports, "setThreadNice", SetThreadNice);
  Export(context, exports, "threadSchedPolicy", ThreadSchedPolicy);
  Export(context, exports, "setThreadSchedPolicy", SetThreadSchedPolicy);
  Export(context, exports, "reserve", Reserve);
  Export(context, exports, "discard", Discard);
  Export(context, exports, "populate", Populate);
  Export(context, exports, "arrayBufferOf", ArrayBufferOf);
}

}  // namespace thread_and_memory
// ---- end of thread scheduling and releasable memory ---------------------------------------------

// ---- GC pauses of a thread ----------------------------------------------------------------------
// watchGc(f64, secondsIndex, countIndex, maxIndex): from now on every GC pause of the calling
// thread's isolate is added where the thread-health table keeps it (f64[secondsIndex] += pause,
// f64[countIndex] += 1, f64[maxIndex] = the longest), from V8's GC prologue and epilogue callbacks,
// as it happens. A worker thread has no other way that lasts: perf_hooks delivers its 'gc' entries
// through the thread's event loop, which the output worker's never turns, and a v8.GCProfiler
// stopped and restarted on a timer to harvest it keeps what its GC callbacks wrote (heap
// statistics as JSON, before and after each GC): megabytes a second in a thread that scavenges
// often. Here nothing is allocated per GC: two clock reads and three stores. A second call
// retargets the watch; unwatchGc() ends it, and so does the thread's exit.
namespace gc_watch {

struct Watch {
  Isolate* isolate;
  std::shared_ptr<v8::BackingStore> store;  // keeps the table's memory mapped while we write it
  double* seconds;
  double* count;
  double* longest;
  std::chrono::steady_clock::time_point began;
  int depth;  // V8 may nest a GC's callbacks (a weak callback's GC inside another)
};

std::mutex watches_mutex;
std::map<Isolate*, Watch*>& Watches() {
  static std::map<Isolate*, Watch*> watches;
  return watches;
}

void Prologue(Isolate* /*isolate*/, v8::GCType /*type*/, v8::GCCallbackFlags /*flags*/, void* data) {
  auto* w = static_cast<Watch*>(data);
  if (w->depth++ == 0) w->began = std::chrono::steady_clock::now();
}

void Epilogue(Isolate* /*isolate*/, v8::GCType /*type*/, v8::GCCallbackFlags /*flags*/, void* data) {
  auto* w = static_cast<Watch*>(data);
  if (w->depth == 0 || --w->depth != 0) return;  // watching began inside this GC, or a nested one
  double pause = std::chrono::duration<double>(std::chrono::steady_clock::now() - w->began).count();
  *w->seconds += pause;
  *w->count += 1;
  if (pause > *w->longest) *w->longest = pause;
}

void Stop(void* data) {
  auto* w = static_cast<Watch*>(data);
  w->isolate->RemoveGCPrologueCallback(Prologue, w);
  w->isolate->RemoveGCEpilogueCallback(Epilogue, w);
  {
    std::lock_guard<std::mutex> lock(watches_mutex);
    Watches().erase(w->isolate);
  }
  delete w;
}

void WatchGc(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  if (info.Length() < 4 || !info[0]->IsFloat64Array() || !info[1]->IsUint32() ||
      !info[2]->IsUint32() || !info[3]->IsUint32()) {
    ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT",
               "expected (Float64Array, secondsIndex, countIndex, maxIndex)", 0);
    return;
  }
  Local<v8::Float64Array> array = info[0].As<v8::Float64Array>();
  size_t length = array->Length();
  uint32_t at[3];
  for (int k = 0; k < 3; k++) {
    at[k] = info[k + 1].As<v8::Uint32>()->Value();
    if (at[k] >= length) {
      ThrowCoded(isolate, "RS_ERR_SHM_BAD_ARGUMENT", "index outside the Float64Array", 0);
      return;
    }
  }
  std::shared_ptr<v8::BackingStore> store = array->Buffer()->GetBackingStore();
  auto* base = reinterpret_cast<double*>(static_cast<uint8_t*>(store->Data()) + array->ByteOffset());
  bool fresh;
  Watch* w;
  {
    std::lock_guard<std::mutex> lock(watches_mutex);
    Watch*& entry = Watches()[isolate];
    fresh = entry == nullptr;
    if (fresh) entry = new Watch{isolate, nullptr, nullptr, nullptr, nullptr, {}, 0};
    w = entry;
  }
  // Only this isolate's thread reaches its watch, and no GC runs while JS does: no lock needed.
  w->store = std::move(store);
  w->seconds = base + at[0];
  w->count = base + at[1];
  w->longest = base + at[2];
  if (!fresh) return;
  isolate->AddGCPrologueCallback(Prologue, w);
  isolate->AddGCEpilogueCallback(Epilogue, w);
  node::AddEnvironmentCleanupHook(isolate, Stop, w);
}

// unwatchGc() -> true if the calling thread's isolate had a watch (now ended).
void UnwatchGc(const FunctionCallbackInfo<Value>& info) {
  Isolate* isolate = info.GetIsolate();
  Watch* w = nullptr;
  {
    std::lock_guard<std::mutex> lock(watches_mutex);
    auto it = Watches().find(isolate);
    if (it != Watches().end()) w = it->second;
  }
  if (w != nullptr) {
    node::RemoveEnvironmentCleanupHook(isolate, Stop, w);
    Stop(w);
  }
  info.GetReturnValue().Set(w != nullptr);
}

void Register(Local<Context> context, Local<Object> exports) {
  Export(context, exports, "watchGc", WatchGc);
  Export(context, exports, "unwatchGc", UnwatchGc);
}

}  // namespace gc_watch
// ---- end of GC pauses of a thread ---------------------------------------------------------------

}  // namespace ringserve_shm

// Context-aware: every Node environment (main thread, each worker thread) gets its own exports.
NODE_MODULE_INIT(/* exports, module, context */) {
  if (ringserve_shm::Export(context, exports, "create", ringserve_shm::Create) &&
      ringserve_shm::Export(context, exports, "open", ringserve_shm::Open) &&
      ringserve_shm::Export(context, exports, "unlink", ringserve_shm::Unlink) &&
      ringserve_shm::Export(context, exports, "futexWait", ringserve_shm::FutexWait) &&
      ringserve_shm::Export(context, exports, "futexWake", ringserve_shm::FutexWake)) {
    ringserve_shm::thread_and_memory::Register(context, exports);
    ringserve_shm::gc_watch::Register(context, exports);
  }
}
