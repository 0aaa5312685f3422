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
} // namespace

extern "C" {

// The entry points tokenizer.cpp looks up with dlsym.
void *pi0spm_load (const char *path, char **error);
void pi0spm_free (void *handle);
int pi0spm_encode (void *handle, const char *text, size_t len, int **ids, size_t *n, char **error);
int pi0spm_vocab_size (void *handle);
int pi0spm_bos_id (void *handle);

__attribute__ ((visibility ("default"))) void *
pi0spm_load (const char *path, char **error)
{
  auto *sp = new sentencepiece::SentencePieceProcessor ();
  const auto status = sp->Load (path);
  if (!status.ok ()) {
    *error = dup_error (status.ToString ());
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__ ((visibility ("default"))) void
pi0spm_free (void *handle)
{
  delete static_cast<sentencepiece::SentencePieceProcessor *> (handle);
}

// On success *ids (malloc'd, caller frees with free()) holds *n ids and 0 is returned.
__attribute__ ((visibility ("default"))) int
pi0spm_encode (void *handle, const char *text, size_t len, int **ids, size_t *n, char **error)
{
  std::vector<int> out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor *> (handle)->Encode (
      std::string (text, len), &out);
  if (!status.ok ()) {
    *error = dup_error (status.ToString ());
    return -1;
  }
  *n = out.size ();
  *ids = static_cast<int *> (std::malloc (sizeof (int) * (out.empty () ? 1 : out.size ())));
  if (!*ids)
    return -1;
  if (!out.empty ())
    std::memcpy (*ids, out.data (), sizeof (int) * out.size ());
  return 0;
}

__attribute__ ((visibility ("default"))) int
pi0spm_vocab_size (void *handle)
{
  return static_cast<sentencepiece::SentencePieceProcessor *> (handle)->GetPieceSize ();
}

__attribute__ ((visibility ("default"))) int
pi0spm_bos_id (void *handle)
{
  return static_cast<sentencepiece::SentencePieceProcessor *> (handle)->bos_id ();
}

} // extern "C"
