// A C face for libsentencepiece, built as its own shared module and loaded by tokenizer.cpp with
// dlopen(RTLD_LOCAL).
//
// Why: Debian's libsentencepiece and LibTorch's libc10 both export a global FLAGS_minloglevel
// (an absl::Flag object in one, an int in the other). Linked into one process, sentencepiece's
// static constructor builds its absl::Flag over libc10's int and overwrites the mutex next to
// it, and the first TorchScript call then deadlocks. RTLD_LOCAL alone does not prevent that:
// libsentencepiece's own references are looked up in the global scope first, where libc10 is.
// So this module links a copy of libsentencepiece with DF_SYMBOLIC set (elf_symbolic.py; the
// flag -Bsymbolic would have set), found through this module's RPATH: sentencepiece's references
// bind to its own definitions first and the two flags never meet. (RTLD_DEEPBIND did the same,
// but AddressSanitizer refuses it; a version script or -Bsymbolic on this module changes nothing,
// since the clashing reference is inside libsentencepiece.)
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace
{
char *
dup_error (const std::string &s)
{
  char *p = static_cast<char *> (std::malloc (s.size () + 1));
  if (p)
    std::memcpy (p, s.c_str (), s.size () + 1);
  return p;
}

// No C++ exception may cross the extern "C" boundary below (unwinding through a C caller is
// undefined; in practice std::terminate). libsentencepiece and what it uses (protobuf, darts,
// std::string/std::vector allocation) can throw, so every entry point runs its body through
// this: an exception becomes an error string in *error (when there is one) and `failed` is
// returned.
template <typename R, typename F>
R
guarded (char **error, R failed, F &&body) noexcept
{
  try {
    return body ();
  } catch (const std::exception &e) {
    if (error)
      *error = dup_error (std::string ("libsentencepiece threw: ") + e.what ());
  } catch (...) {
    if (error)
      *error = dup_error ("libsentencepiece threw a non-standard exception");
  }
  return failed;
}

sentencepiece::SentencePieceProcessor *
processor (void *handle)
{
  return static_cast<sentencepiece::SentencePieceProcessor *> (handle);
}
} // namespace

extern "C" {

// The entry points tokenizer.cpp looks up with dlsym. None throws: errors come back as a
// malloc'd string in *error (caller frees with free()).
void *pi0spm_load (const char *path, char **error);
void pi0spm_free (void *handle);
int pi0spm_encode (void *handle, const char *text, size_t len, int **ids, size_t *n, char **error);
int pi0spm_vocab_size (void *handle);
int pi0spm_bos_id (void *handle);

__attribute__ ((visibility ("default"))) void *
pi0spm_load (const char *path, char **error)
{
  return guarded<void *> (error, nullptr, [&] () -> void * {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor> ();
    const auto status = sp->Load (path);
    if (!status.ok ()) {
      *error = dup_error (status.ToString ());
      return nullptr;
    }
    return sp.release ();
  });
}

__attribute__ ((visibility ("default"))) void
pi0spm_free (void *handle)
{
  // A destructor that throws would terminate anyway (destructors are noexcept); the guard keeps
  // that promise explicit.
  guarded<int> (nullptr, 0, [&] {
    delete processor (handle);
    return 0;
  });
}

// On success *ids (malloc'd, caller frees with free()) holds *n ids and 0 is returned; on failure
// -1, with *error set.
__attribute__ ((visibility ("default"))) int
pi0spm_encode (void *handle, const char *text, size_t len, int **ids, size_t *n, char **error)
{
  return guarded<int> (error, -1, [&] {
    std::vector<int> out;
    const auto status = processor (handle)->Encode (std::string (text, len), &out);
    if (!status.ok ()) {
      *error = dup_error (status.ToString ());
      return -1;
    }
    *ids = static_cast<int *> (std::malloc (sizeof (int) * (out.empty () ? 1 : out.size ())));
    if (!*ids) {
      *error = dup_error ("out of memory for " + std::to_string (out.size ()) + " token ids");
      return -1;
    }
    *n = out.size ();
    if (!out.empty ())
      std::memcpy (*ids, out.data (), sizeof (int) * out.size ());
    return 0;
  });
}

// -1 if libsentencepiece threw (the caller treats a negative size or id as an unusable model).
__attribute__ ((visibility ("default"))) int
pi0spm_vocab_size (void *handle)
{
  return guarded<int> (nullptr, -1, [&] { return processor (handle)->GetPieceSize (); });
}

__attribute__ ((visibility ("default"))) int
pi0spm_bos_id (void *handle)
{
  return guarded<int> (nullptr, -1, [&] { return processor (handle)->bos_id (); });
}

} // extern "C"
