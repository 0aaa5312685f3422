// safetensors reader (memory-mapped, validated) and writer. See safetensors.h for the contract.
#include "inference/io/pi0safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/types.h>

#include "common/pi0atomicfile.h"
#include "common/pi0json.h"

#include "inference/io/pi0error.h"

static_assert (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace pi0
{
namespace
{

// The reference implementation refuses headers above this size; so do we, which also bounds
// what a hostile file can make us parse.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  const char *name;
  torch::ScalarType type;
  uint64_t size;
};

const DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64, 8},
    {"F32", torch::kFloat32, 4},
    {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2},
    {"F8_E4M3", torch::kFloat8_e4m3fn, 1},
    {"F8_E5M2", torch::kFloat8_e5m2, 1},
    {"I64", torch::kInt64, 8},
    {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},
    {"I8", torch::kInt8, 1},
    {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

// Valid in the format but with no (or no well-supported) LibTorch counterpart: named apart so
// the error says "not supported" rather than "unknown".
const char *const kKnownUnsupported[] = {"F4",          "F6_E2M3",     "F6_E3M2", "F8_E8M0",
                                         "F8_E4M3FNUZ", "F8_E5M2FNUZ", "U16",     "U32",
                                         "U64",         "C64"};

const DtypeInfo *
find_dtype (const std::string &name)
{
  for (const auto &d : kDtypes)
    if (name == d.name)
      return &d;
  return nullptr;
}

const DtypeInfo *
find_dtype (torch::ScalarType type)
{
  for (const auto &d : kDtypes)
    if (type == d.type)
      return &d;
  return nullptr;
}

std::string
errno_text (int err)
{
  return std::strerror (err);
}

std::string
shape_text (const std::vector<int64_t> &shape)
{
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < shape.size (); i++)
    s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str ();
}

// A read-only file mapped private (copy-on-write): tensors may be written to without SIGSEGV
// and without touching the file. Tensors hold a shared_ptr to it through their deleter.
class Mapping
{
public:
  Mapping (const std::string &path)
  {
    // O_NONBLOCK: a FIFO with no writer fails the S_ISREG check below instead of blocking.
    int fd = ::open (path.c_str (), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      throw Error (path + ": cannot open: " + errno_text (errno));
    struct stat st;
    if (::fstat (fd, &st) != 0) {
      int err = errno;
      ::close (fd);
      throw Error (path + ": cannot stat: " + errno_text (err));
    }
    if (!S_ISREG (st.st_mode)) {
      ::close (fd);
      throw Error (path + ": not a regular file");
    }
    size_ = static_cast<uint64_t> (st.st_size);
    if (size_ < 8) {
      ::close (fd);
      throw Error (path + ": file is " + std::to_string (size_) +
                   " bytes, too small for a safetensors header (truncated or not safetensors)");
    }
    void *addr = ::mmap (nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close (fd);
    if (addr == MAP_FAILED)
      throw Error (path + ": cannot mmap: " + errno_text (err));
    base_ = static_cast<uint8_t *> (addr);
  }
  ~Mapping () { ::munmap (base_, size_); }
  Mapping (const Mapping &) = delete;
  Mapping &operator= (const Mapping &) = delete;

  uint8_t *base () const { return base_; }
  uint64_t size () const { return size_; }

private:
  uint8_t *base_ = nullptr;
  uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  const DtypeInfo *dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

struct Header {
  uint64_t header_bytes = 0;  // N
  std::vector<Entry> entries; // sorted by data offsets
  std::map<std::string, std::string> metadata;
};

uint64_t
get_uint (const json::Value &v, const std::string &what, const std::string &where)
{
  if (!v.is_number_unsigned () && !(v.is_number_integer () && v.get<int64_t> () >= 0))
    throw Error (where + ": " + what + " must be a non-negative integer, found " + v.dump ());
  return v.get<uint64_t> ();
}

// Parses and validates the header of a mapped file. Touches only the first 8 + N bytes.
Header
parse_header (const std::string &path, const uint8_t *base, uint64_t file_size)
{
  Header h;
  uint64_t n;
  std::memcpy (&n, base, 8);
  if (n > kMaxHeaderBytes)
    throw Error (path + ": header length " + std::to_string (n) + " is larger than the format's " +
                 "limit of " + std::to_string (kMaxHeaderBytes) +
                 " bytes (corrupt or not safetensors)");
  if (n > file_size - 8)
    throw Error (path + ": header length " + std::to_string (n) +
                 " runs past the end of the file (" + std::to_string (file_size) +
                 " bytes): truncated or not safetensors");
  if (n < 2 || base[8] != '{')
    throw Error (path + ": header does not start with '{' (not a safetensors file)");
  h.header_bytes = n;

  // Strict: a header whose meaning depends on which of two duplicate keys wins is refused.
  std::string err;
  const std::optional<json::Value> parsed = json::parse_strict (
      std::string (reinterpret_cast<const char *> (base + 8), n), path + ": header", &err);
  if (!parsed)
    throw Error (err);
  const json::Value &j = *parsed;
  if (!j.is_object ())
    throw Error (path + ": header is not a JSON object");

  const uint64_t data_size = file_size - 8 - n;
  for (auto it = j.begin (); it != j.end (); ++it) {
    const std::string &name = it.key ();
    const json::Value &v = it.value ();
    if (name == "__metadata__") {
      if (v.is_null ())
        continue;
      if (!v.is_object ())
        throw Error (path + ": \"__metadata__\" must be an object of strings, found " +
                     v.type_name ());
      for (auto m = v.begin (); m != v.end (); ++m) {
        if (!m.value ().is_string ())
          throw Error (path + ": \"__metadata__\" value of '" + m.key () +
                       "' must be a string, found " + m.value ().type_name ());
        h.metadata[m.key ()] = m.value ().get<std::string> ();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!v.is_object ())
      throw Error (where + ": entry must be an object, found " + v.type_name ());
    for (const char *field : {"dtype", "shape", "data_offsets"})
      if (!v.contains (field))
        throw Error (where + ": missing \"" + field + "\"");

    Entry e;
    e.name = name;
    const auto &dt = v["dtype"];
    if (!dt.is_string ())
      throw Error (where + ": \"dtype\" must be a string, found " + dt.dump ());
    const std::string dname = dt.get<std::string> ();
    e.dtype = find_dtype (dname);
    if (!e.dtype) {
      bool known = std::any_of (std::begin (kKnownUnsupported), std::end (kKnownUnsupported),
                                [&] (const char *k) { return dname == k; });
      throw Error (
          where +
          (known ? ": dtype " + dname + " is not supported" : ": unknown dtype \"" + dname + "\"") +
          " (supported: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U8 BOOL)");
    }

    const auto &shape = v["shape"];
    if (!shape.is_array ())
      throw Error (where + ": \"shape\" must be an array, found " + shape.dump ());
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto &d : shape) {
      uint64_t dim = get_uint (d, "each \"shape\" entry", where);
      if (dim > static_cast<uint64_t> (std::numeric_limits<int64_t>::max ()))
        overflow = true;
      overflow |= __builtin_mul_overflow (numel, dim, &numel);
      e.shape.push_back (static_cast<int64_t> (dim));
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow (numel, e.dtype->size, &nbytes);
    if (overflow || numel > static_cast<uint64_t> (std::numeric_limits<int64_t>::max ()))
      throw Error (where + ": shape " + shape.dump () + " is too large (element count overflows)");

    const auto &off = v["data_offsets"];
    if (!off.is_array () || off.size () != 2)
      throw Error (where + ": \"data_offsets\" must be [begin, end], found " + off.dump ());
    e.begin = get_uint (off[0], "data_offsets begin", where);
    e.end = get_uint (off[1], "data_offsets end", where);
    if (e.end < e.begin)
      throw Error (where + ": data_offsets " + off.dump () + " end before they begin");
    if (e.end - e.begin != nbytes)
      throw Error (where + ": " + dname + " " + shape_text (e.shape) + " needs " +
                   std::to_string (nbytes) + " bytes but data_offsets " + off.dump () + " hold " +
                   std::to_string (e.end - e.begin));
    if (e.end > data_size)
      throw Error (where + ": data_offsets " + off.dump () + " run past the end of the data (" +
                   std::to_string (data_size) +
                   " bytes after the header): truncated file or bad offsets");
    h.entries.push_back (std::move (e));
  }

  // Same rule as the reference reader: the tensors tile the data exactly, in offset order.
  std::sort (h.entries.begin (), h.entries.end (), [] (const Entry &a, const Entry &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry *prev = nullptr;
  for (const auto &e : h.entries) {
    if (e.begin < expected)
      throw Error (path + ": tensor '" + e.name + "' data [" + std::to_string (e.begin) + ", " +
                   std::to_string (e.end) + ") overlaps tensor '" + prev->name + "' [" +
                   std::to_string (prev->begin) + ", " + std::to_string (prev->end) + ")");
    if (e.begin > expected)
      throw Error (path + ": " + std::to_string (e.begin - expected) + " bytes before tensor '" +
                   e.name + "' (offset " + std::to_string (e.begin) + ") belong to no tensor");
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size)
    throw Error (path + ": " + std::to_string (data_size - expected) +
                 " bytes after the last tensor belong to no tensor (data is " +
                 std::to_string (data_size) + " bytes, tensors cover " + std::to_string (expected) +
                 ")");
  return h;
}

} // namespace

std::string
safetensors_dtype_name (torch::ScalarType dtype)
{
  const DtypeInfo *d = find_dtype (dtype);
  if (!d)
    throw Error (std::string ("safetensors has no code for dtype ") + c10::toString (dtype));
  return d->name;
}

TensorMap
load_safetensors (const std::string &path)
{
  auto mapping = std::make_shared<Mapping> (path);
  Header h = parse_header (path, mapping->base (), mapping->size ());
  uint8_t *data = mapping->base () + 8 + h.header_bytes;

  TensorMap out;
  for (const auto &e : h.entries) {
    uint8_t *p = data + e.begin;
    const auto options = torch::TensorOptions ().dtype (e.dtype->type);
    if (e.dtype->type == torch::kBool) {
      // Any other byte is undefined behaviour for LibTorch's bool kernels.
      for (uint64_t i = 0; i < e.end - e.begin; i++)
        if (p[i] > 1)
          throw Error (path + ": tensor '" + e.name + "' (BOOL) holds byte " +
                       std::to_string (p[i]) + " at element " + std::to_string (i) +
                       "; BOOL bytes must be 0 or 1");
    }
    torch::Tensor t;
    if (e.end == e.begin) {
      t = torch::empty (e.shape, options);
    } else if (reinterpret_cast<uintptr_t> (p) % e.dtype->size != 0) {
      t = torch::empty (e.shape, options);
      std::memcpy (t.data_ptr (), p, e.end - e.begin);
    } else {
      t = torch::from_blob (
          p, e.shape, [mapping] (void *) {}, options);
    }
    out.emplace (e.name, std::move (t));
  }
  return out;
}

std::map<std::string, std::string>
load_safetensors_metadata (const std::string &path)
{
  Mapping mapping (path);
  return parse_header (path, mapping.base (), mapping.size ()).metadata;
}

void
save_safetensors (const std::string &path, const TensorMap &tensors,
                  const std::map<std::string, std::string> &metadata)
{
  struct Out {
    const std::string *name;
    const DtypeInfo *dtype;
    torch::Tensor t;
  };
  std::vector<Out> outs;
  for (const auto &[name, t] : tensors) {
    if (name == "__metadata__")
      throw Error (path + ": \"__metadata__\" is reserved and cannot name a tensor");
    if (!t.defined ())
      throw Error (path + ": tensor '" + name + "' is undefined");
    if (t.layout () != torch::kStrided)
      throw Error (path + ": tensor '" + name + "' is not dense (layout " +
                   c10::toString (t.layout ()) + ")");
    const DtypeInfo *d = find_dtype (t.scalar_type ());
    if (!d)
      throw Error (path + ": tensor '" + name + "' has dtype " + c10::toString (t.scalar_type ()) +
                   ", which safetensors cannot store");
    outs.push_back ({&name, d, t});
  }
  // Largest elements first keeps every tensor aligned to its element size.
  std::stable_sort (outs.begin (), outs.end (),
                    [] (const Out &a, const Out &b) { return a.dtype->size > b.dtype->size; });

  json::Value header = json::Value::object ();
  if (!metadata.empty ())
    header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto &o : outs) {
    const uint64_t nbytes = static_cast<uint64_t> (o.t.numel ()) * o.dtype->size;
    header[*o.name] = {{"dtype", o.dtype->name},
                       {"shape", o.t.sizes ().vec ()},
                       {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump ();
  } catch (const json::Value::exception &e) {
    throw Error (path + ": a tensor name or metadata string is not valid UTF-8 (" + e.what () +
                 ")");
  }
  text.append ((8 - text.size () % 8) % 8, ' ');
  const uint64_t n = text.size ();

  // Whole or not at all: a checkpoint half written is never found under its name.
  std::string error;
  const bool ok = write_file_atomic (
      path,
      [&] (int fd, std::string *why) {
        if (!write_all (fd, &n, 8, why) || !write_all (fd, text.data (), text.size (), why))
          return false;
        for (const auto &o : outs) {
          torch::Tensor c = o.t.detach ().to (torch::kCPU).contiguous ();
          if (c.numel () > 0 && !write_all (fd, c.data_ptr (), c.nbytes (), why))
            return false;
        }
        return true;
      },
      &error);
  if (!ok)
    throw Error (error);
}

} // namespace pi0
