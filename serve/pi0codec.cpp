/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "serve/pi0codec.h"

#include "common/pi0json.h"

#include <msgpack.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <set>

#if defined(__FAST_MATH__)
#error "the finite checks on robot state need IEEE semantics: do not build with -ffast-math"
#endif
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "numpy's little-endian arrays are read in place: a little-endian host is assumed"
#endif

namespace pi0::serve
{

namespace
{

enum class Kind { kBool, kInt, kUInt, kFloat };

struct DType {
  const char *name;
  size_t size;
  Kind kind;
};

/* numpy's dtype.str of every accepted type. Nothing else: no objects ("|O"), no records or raw
 * bytes ("|V"), no strings ("<U"), no complex, no big-endian, no datetimes. */
const DType kDTypes[] = {
    {"|b1", 1, Kind::kBool},  {"|u1", 1, Kind::kUInt},  {"|i1", 1, Kind::kInt},
    {"<u2", 2, Kind::kUInt},  {"<i2", 2, Kind::kInt},   {"<u4", 4, Kind::kUInt},
    {"<i4", 4, Kind::kInt},   {"<u8", 8, Kind::kUInt},  {"<i8", 8, Kind::kInt},
    {"<f2", 2, Kind::kFloat}, {"<f4", 4, Kind::kFloat}, {"<f8", 8, Kind::kFloat},
};

const char *kAccepted = "bool, int8-int64, uint8-uint64, float16, float32, float64 (little-endian)";

constexpr int kMaxNdim = 8;

/* Strings and binaries are referenced in place: image pixels are not copied. */
bool
reference_all (msgpack::type::object_type type, std::size_t, void *)
{
  return type == msgpack::type::STR || type == msgpack::type::BIN;
}

bool
as_text (const msgpack::object &o, std::string *out)
{
  if (o.type == msgpack::type::STR) {
    out->assign (o.via.str.ptr, o.via.str.size);
    return true;
  }
  if (o.type == msgpack::type::BIN) {
    out->assign (o.via.bin.ptr, o.via.bin.size);
    return true;
  }
  return false;
}

/* An ndarray or a numpy scalar, as msgpack_numpy packs them. */
struct Array {
  const DType *dtype = nullptr;
  std::vector<uint64_t> shape; /* empty for a scalar */
  const uint8_t *data = nullptr;
  size_t nbytes = 0;
  const msgpack::object *scalar = nullptr; /* an __npgeneric__'s value */
  uint64_t count () const
  {
    uint64_t n = 1;
    for (auto d : shape)
      n *= d;
    return n;
  }
};

enum class Shape { kNotArray, kArray, kBad };

Shape
read_array (const msgpack::object &o, const std::string &where, Array *a, std::string *error)
{
  if (o.type != msgpack::type::MAP)
    return Shape::kNotArray;
  bool nd = false, generic = false;
  const msgpack::object *data = nullptr, *dtype = nullptr, *shape = nullptr;
  for (uint32_t i = 0; i < o.via.map.size; i++) {
    std::string k;
    if (!as_text (o.via.map.ptr[i].key, &k))
      return Shape::kNotArray;
    const msgpack::object &v = o.via.map.ptr[i].val;
    if (k == "__ndarray__")
      nd = true;
    else if (k == "__npgeneric__")
      generic = true;
    else if (k == "data")
      data = &v;
    else if (k == "dtype")
      dtype = &v;
    else if (k == "shape")
      shape = &v;
  }
  if (!nd && !generic)
    return Shape::kNotArray;
  const size_t expected_keys = nd ? 4 : 3;
  if ((nd && generic) || !data || !dtype || (nd && !shape) || (generic && shape) ||
      o.via.map.size != expected_keys) {
    *error = where + ": a malformed numpy array (expected the keys openpi-client's msgpack_numpy "
                     "writes and nothing else)";
    return Shape::kBad;
  }
  std::string dt;
  if (!as_text (*dtype, &dt)) {
    *error = where + ": the dtype must be a string";
    return Shape::kBad;
  }
  for (const auto &d : kDTypes)
    if (dt == d.name)
      a->dtype = &d;
  if (!a->dtype) {
    *error = where + ": dtype '" + dt.substr (0, 32) + "' is not accepted (only " + kAccepted + ")";
    return Shape::kBad;
  }
  if (generic) {
    if (data->type != msgpack::type::BOOLEAN && data->type != msgpack::type::POSITIVE_INTEGER &&
        data->type != msgpack::type::NEGATIVE_INTEGER && data->type != msgpack::type::FLOAT32 &&
        data->type != msgpack::type::FLOAT64) {
      *error = where + ": a numpy scalar must hold a number";
      return Shape::kBad;
    }
    a->scalar = data;
    return Shape::kArray;
  }
  if (shape->type != msgpack::type::ARRAY || shape->via.array.size > kMaxNdim) {
    *error =
        where + ": the shape must be a list of at most " + std::to_string (kMaxNdim) + " sizes";
    return Shape::kBad;
  }
  uint64_t count = 1;
  for (uint32_t i = 0; i < shape->via.array.size; i++) {
    const msgpack::object &d = shape->via.array.ptr[i];
    if (d.type != msgpack::type::POSITIVE_INTEGER) {
      if (d.type == msgpack::type::NEGATIVE_INTEGER) {
        *error = where + ": negative size in the shape";
        return Shape::kBad;
      }
      *error = where + ": the shape must hold integers";
      return Shape::kBad;
    }
    const uint64_t n = d.via.u64;
    /* Bounded by the message: no count can exceed its bytes, so no product overflows. */
    if (n > (1ull << 40) || (n && count > (1ull << 40) / n)) {
      *error = where + ": the shape is larger than any message";
      return Shape::kBad;
    }
    count *= n;
    a->shape.push_back (n);
  }
  if (data->type != msgpack::type::BIN) {
    *error = where + ": the array data must be bytes";
    return Shape::kBad;
  }
  if (count * a->dtype->size != data->via.bin.size) {
    *error = where + ": " + std::to_string (data->via.bin.size) + " bytes of data for " +
             std::to_string (count) + " values of " + a->dtype->name;
    return Shape::kBad;
  }
  a->data = reinterpret_cast<const uint8_t *> (data->via.bin.ptr);
  a->nbytes = data->via.bin.size;
  return Shape::kArray;
}

float
half_to_float (uint16_t h)
{
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp ((double)mant, -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp ((double)(mant | 0x400), (int)exp - 25);
  return (float)(sign ? -v : v);
}

/* Element @i of an array as a double. */
double
element (const Array &a, uint64_t i)
{
  const uint8_t *p = a.data + i * a.dtype->size;
  switch (a.dtype->kind) {
    case Kind::kBool:
      return *p ? 1.0 : 0.0;
    case Kind::kUInt: {
      uint64_t v = 0;
      memcpy (&v, p, a.dtype->size);
      return (double)v;
    }
    case Kind::kInt: {
      int64_t v = 0;
      memcpy (&v, p, a.dtype->size);
      /* sign-extend from the element's width */
      const int shift = 64 - 8 * (int)a.dtype->size;
      v = (int64_t)((uint64_t)v << shift) >> shift;
      return (double)v;
    }
    case Kind::kFloat:
    default:
      if (a.dtype->size == 2) {
        uint16_t h;
        memcpy (&h, p, 2);
        return half_to_float (h);
      }
      if (a.dtype->size == 4) {
        float f;
        memcpy (&f, p, 4);
        return f;
      }
      double d;
      memcpy (&d, p, 8);
      return d;
  }
}

bool
number (const msgpack::object &o, double *out)
{
  switch (o.type) {
    case msgpack::type::BOOLEAN:
      *out = o.via.boolean ? 1.0 : 0.0;
      return true;
    case msgpack::type::POSITIVE_INTEGER:
      *out = (double)o.via.u64;
      return true;
    case msgpack::type::NEGATIVE_INTEGER:
      *out = (double)o.via.i64;
      return true;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      *out = o.via.f64;
      return true;
    default:
      return false;
  }
}

/* Appends a value as float32, refusing what a robot state must never be. */
bool
push_state (double v, const std::string &where, size_t index, std::vector<float> *out,
            std::string *error)
{
  if (!std::isfinite (v) || std::fabs (v) > (double)FLT_MAX) {
    *error = where + "[" + std::to_string (index) + "] is " +
             (std::isnan (v)   ? "NaN"
              : std::isinf (v) ? "infinite"
                               : "beyond float32's range") +
             ": the state must be finite float32 values";
    return false;
  }
  out->push_back ((float)v);
  return true;
}

class Walker
{
public:
  Walker (const Mapping &m, const DecodeLimits &lim, Observation *out, std::string *error)
      : m_ (m), lim_ (lim), out_ (out), error_ (error), parts_ (m.state.size ()),
        part_seen_ (m.state.size (), false)
  {
  }

  bool walk (const msgpack::object &map, KeyPath &prefix)
  {
    std::set<std::string> seen;
    for (uint32_t i = 0; i < map.via.map.size; i++) {
      const msgpack::object &k = map.via.map.ptr[i].key;
      if (k.type != msgpack::type::STR) {
        return fail ((prefix.empty () ? std::string ("the observation") : where (prefix)) +
                     ": keys must be strings");
      }
      std::string key (k.via.str.ptr, k.via.str.size);
      if (!seen.insert (key).second) {
        prefix.push_back (key);
        return fail ("the key " + where (prefix) + " is given twice");
      }
      prefix.push_back (key);
      if (!visit (map.via.map.ptr[i].val, prefix))
        return false;
      prefix.pop_back ();
    }
    return true;
  }

  bool finish ()
  {
    for (int v = 0; v < kNumViews; v++)
      if (!m_.views[v].empty () && !out_->views[v].present && !m_.optional[v])
        return fail ("the observation has no " + where (m_.views[v]) + " (the " + kViewNames[v] +
                     " camera of mapping '" + m_.name + "')");
    size_t dim = 0;
    for (size_t i = 0; i < m_.state.size (); i++) {
      if (!part_seen_[i])
        return fail ("the observation has no " + where (m_.state[i]) + " (robot state)");
      dim += parts_[i].size ();
    }
    if ((int)dim != m_.state_dim)
      return fail ("the robot state has " + std::to_string (dim) + " values; mapping '" + m_.name +
                   "' expects " + std::to_string (m_.state_dim));
    out_->state.clear ();
    for (auto &p : parts_)
      out_->state.insert (out_->state.end (), p.begin (), p.end ());
    return true;
  }

private:
  static std::string where (const KeyPath &p) { return "'" + key_path_text (p) + "'"; }

  bool fail (const std::string &what)
  {
    *error_ = what;
    return false;
  }

  bool visit (const msgpack::object &v, KeyPath &path)
  {
    for (int i = 0; i < kNumViews; i++)
      if (m_.views[i] == path)
        return image (v, path, &out_->views[i]);
    for (size_t i = 0; i < m_.state.size (); i++)
      if (m_.state[i] == path)
        return state_part (v, path, i);
    if (!m_.prompt.empty () && m_.prompt == path)
      return prompt (v, path);
    if (!m_.seed.empty () && m_.seed == path)
      return seed (v, path);
    for (const auto &p : m_.ignore)
      if (p == path)
        return true;
    if (holds_leaf (path)) {
      Array a;
      std::string not_used;
      if (v.type != msgpack::type::MAP ||
          read_array (v, where (path), &a, &not_used) != Shape::kNotArray)
        return fail (where (path) + " must be a map of keys (mapping '" + m_.name +
                     "' reads keys inside it)");
      return walk (v, path);
    }
    std::string known;
    auto add = [&] (const KeyPath &p) {
      if (!p.empty ())
        known += (known.empty () ? "" : ", ") + key_path_text (p);
    };
    for (const auto &p : m_.views)
      add (p);
    for (const auto &p : m_.state)
      add (p);
    add (m_.prompt);
    add (m_.seed);
    return fail ("unknown key " + where (path) + ": mapping '" + m_.name + "' reads " + known +
                 " (list a key under \"ignore\" in the mapping to accept and drop it)");
  }

  bool holds_leaf (const KeyPath &prefix) const
  {
    auto under = [&] (const KeyPath &p) {
      return p.size () > prefix.size () && std::equal (prefix.begin (), prefix.end (), p.begin ());
    };
    for (const auto &p : m_.views)
      if (under (p))
        return true;
    for (const auto &p : m_.state)
      if (under (p))
        return true;
    for (const auto &p : m_.ignore)
      if (under (p))
        return true;
    return under (m_.prompt) || under (m_.seed);
  }

  bool image (const msgpack::object &v, const KeyPath &path, ImageView *out)
  {
    Array a;
    const std::string w = where (path);
    switch (read_array (v, w, &a, error_)) {
      case Shape::kBad:
        return false;
      case Shape::kNotArray:
        return fail (w + ": an image must be a numpy uint8 array");
      case Shape::kArray:
        break;
    }
    auto shape_text = [&] {
      std::string s = "[";
      for (size_t i = 0; i < a.shape.size (); i++)
        s += (i ? "," : "") + std::to_string (a.shape[i]);
      return s + "]";
    };
    const std::string dt = a.dtype->name;
    const bool is_float = dt == "<f4" || dt == "<f8";
    if (a.scalar || (dt != "|u1" && !is_float) || a.shape.size () != 3 ||
        (a.shape[0] != 3 && a.shape[2] != 3))
      return fail (
          w + ": an image must be uint8 [H,W,3] or [3,H,W] (or float32/float64 in [0, 1]); got " +
          dt + " " + (a.scalar ? std::string ("scalar") : shape_text ()));
    out->chw = a.shape[0] == 3;
    const uint64_t h = out->chw ? a.shape[1] : a.shape[0];
    const uint64_t wd = out->chw ? a.shape[2] : a.shape[1];
    if (h < 1 || wd < 1 || h > (uint64_t)lim_.max_image_side || wd > (uint64_t)lim_.max_image_side)
      return fail (w + ": image size " + std::to_string (wd) + "x" + std::to_string (h) +
                   " is outside 1x1 .. " + std::to_string (lim_.max_image_side) + "x" +
                   std::to_string (lim_.max_image_side));
    out->present = true;
    out->data = a.data;
    if (is_float && !float_pixels (a, w, out))
      return false;
    out->width = (int)wd;
    out->height = (int)h;
    return true;
  }

  /* openpi's _parse_image: (255 * image).astype(np.uint8), the product in the image's own
   * float type, then truncated. Values outside [0, 1] (where numpy's cast to uint8 is undefined)
   * and non-finite ones are refused. */
  bool float_pixels (const Array &a, const std::string &w, ImageView *out)
  {
    const uint64_t n = a.count ();
    auto px = std::make_shared<std::vector<uint8_t>> (n);
    for (uint64_t i = 0; i < n; i++) {
      const double x = element (a, i);
      if (!(x >= 0.0 && x <= 1.0))
        return fail (w + ": a float image must hold values in [0, 1] (openpi converts it as " +
                     "255 * image to uint8); value " + std::to_string (i) + " is " +
                     std::to_string (x));
      (*px)[i] = a.dtype->size == 4 ? (uint8_t)(255.0f * (float)x) : (uint8_t)(255.0 * x);
    }
    out->owned = px;
    out->data = px->data ();
    return true;
  }

  bool state_part (const msgpack::object &v, const KeyPath &path, size_t index)
  {
    const std::string w = where (path);
    std::vector<float> &dst = parts_[index];
    part_seen_[index] = true;
    Array a;
    double d;
    switch (read_array (v, w, &a, error_)) {
      case Shape::kBad:
        return false;
      case Shape::kArray:
        if (a.scalar) {
          number (*a.scalar, &d);
          return push_state (d, w, 0, &dst, error_);
        }
        if (a.shape.size () > 1)
          return fail (w + ": the state must be a 1-D array (or a scalar)");
        if (a.count () > (uint64_t)m_.state_dim)
          return fail (w + ": " + std::to_string (a.count ()) + " state values; mapping '" +
                       m_.name + "' expects " + std::to_string (m_.state_dim) + " in all");
        for (uint64_t i = 0; i < a.count (); i++)
          if (!push_state (element (a, i), w, i, &dst, error_))
            return false;
        return true;
      case Shape::kNotArray:
        break;
    }
    if (number (v, &d))
      return push_state (d, w, 0, &dst, error_);
    if (v.type == msgpack::type::ARRAY) {
      if (v.via.array.size > (uint32_t)m_.state_dim)
        return fail (w + ": " + std::to_string (v.via.array.size) + " state values; mapping '" +
                     m_.name + "' expects " + std::to_string (m_.state_dim) + " in all");
      for (uint32_t i = 0; i < v.via.array.size; i++) {
        if (!number (v.via.array.ptr[i], &d))
          return fail (w + "[" + std::to_string (i) + "] is not a number");
        if (!push_state (d, w, i, &dst, error_))
          return false;
      }
      return true;
    }
    return fail (w + ": the state must be numbers (a numpy array, a list or a scalar)");
  }

  bool prompt (const msgpack::object &v, const KeyPath &path)
  {
    std::string s;
    if (v.type != msgpack::type::STR && v.type != msgpack::type::BIN)
      return fail (where (path) + ": the prompt must be a string");
    as_text (v, &s);
    if (s.size () > lim_.max_prompt)
      return fail (where (path) + ": the prompt is longer than " +
                   std::to_string (lim_.max_prompt) + " bytes");
    if (s.find ('\0') != std::string::npos)
      return fail (where (path) + ": the prompt contains a NUL character (U+0000)");
    if (!valid_utf8 (s))
      return fail (where (path) + ": the prompt is not valid UTF-8");
    out_->prompt = s;
    return true;
  }

  bool seed (const msgpack::object &v, const KeyPath &path)
  {
    Array a;
    const msgpack::object *o = &v;
    switch (read_array (v, where (path), &a, error_)) {
      case Shape::kBad:
        return false;
      case Shape::kArray:
        if (!a.scalar)
          return fail (where (path) + ": the seed must be a non-negative integer");
        o = a.scalar;
        break;
      case Shape::kNotArray:
        break;
    }
    if (o->type != msgpack::type::POSITIVE_INTEGER)
      return fail (where (path) + ": the seed must be a non-negative integer");
    out_->seed = o->via.u64;
    return true;
  }

  static bool valid_utf8 (const std::string &s)
  {
    size_t i = 0;
    const auto *p = reinterpret_cast<const unsigned char *> (s.data ());
    while (i < s.size ()) {
      const unsigned c = p[i];
      size_t n;
      uint32_t cp;
      if (c < 0x80) {
        if (c == 0)
          return false; /* a NUL would cut the prompt in C strings downstream */
        i++;
        continue;
      } else if ((c & 0xe0) == 0xc0) {
        n = 1, cp = c & 0x1f;
      } else if ((c & 0xf0) == 0xe0) {
        n = 2, cp = c & 0x0f;
      } else if ((c & 0xf8) == 0xf0) {
        n = 3, cp = c & 0x07;
      } else {
        return false;
      }
      for (size_t k = 1; k <= n; k++) {
        if (i + k >= s.size () || (p[i + k] & 0xc0) != 0x80)
          return false;
        cp = (cp << 6) | (p[i + k] & 0x3f);
      }
      /* overlong forms, surrogates, beyond U+10FFFF */
      if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
          (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return false;
      i += n + 1;
    }
    return true;
  }

  const Mapping &m_;
  const DecodeLimits &lim_;
  Observation *out_;
  std::string *error_;
  std::vector<std::vector<float>> parts_;
  std::vector<bool> part_seen_;
};

void
pack_key (msgpack::packer<msgpack::sbuffer> &pk, const char *key)
{
  const size_t n = strlen (key);
  pk.pack_str ((uint32_t)n);
  pk.pack_str_body (key, (uint32_t)n);
}

/* msgpack_numpy's keys are bytes (b"__ndarray__"): its unpacker looks them up as bytes. */
void
pack_bin_key (msgpack::packer<msgpack::sbuffer> &pk, const char *key)
{
  const size_t n = strlen (key);
  pk.pack_bin ((uint32_t)n);
  pk.pack_bin_body (key, (uint32_t)n);
}

/* A float64, always: msgpack-c's pack_double writes an integral double as an integer, and the
 * clients (Python's msgpack) would get 12 where openpi's server sends 12.0. */
void
pack_float64 (msgpack::sbuffer &buf, double d)
{
  uint64_t bits;
  std::memcpy (&bits, &d, sizeof bits);
  char out[9] = {(char)0xcb};
  for (int i = 0; i < 8; i++)
    out[1 + i] = (char)(bits >> (56 - 8 * i));
  buf.write (out, sizeof out);
}

void
pack_json (msgpack::packer<msgpack::sbuffer> &pk, msgpack::sbuffer &buf,
           const json::OrderedValue &v)
{
  using T = json::OrderedValue::value_t;
  switch (v.type ()) {
    case T::null:
      pk.pack_nil ();
      break;
    case T::boolean:
      if (v.get<bool> ())
        pk.pack_true ();
      else
        pk.pack_false ();
      break;
    case T::number_integer:
      pk.pack_int64 (v.get<int64_t> ());
      break;
    case T::number_unsigned:
      pk.pack_uint64 (v.get<uint64_t> ());
      break;
    case T::number_float:
      pack_float64 (buf, v.get<double> ()); /* 1.0 stays a float, as Python's msgpack sends it */
      break;
    case T::string: {
      const auto &s = v.get_ref<const std::string &> ();
      pk.pack_str ((uint32_t)s.size ());
      pk.pack_str_body (s.data (), (uint32_t)s.size ());
      break;
    }
    case T::array:
      pk.pack_array ((uint32_t)v.size ());
      for (const auto &e : v)
        pack_json (pk, buf, e);
      break;
    case T::object:
      pk.pack_map ((uint32_t)v.size ());
      for (auto it = v.begin (); it != v.end (); ++it) {
        pk.pack_str ((uint32_t)it.key ().size ());
        pk.pack_str_body (it.key ().data (), (uint32_t)it.key ().size ());
        pack_json (pk, buf, it.value ());
      }
      break;
    default:
      pk.pack_nil ();
      break;
  }
}

} // namespace

bool
decode_observation (const uint8_t *data, size_t size, const Mapping &mapping,
                    const DecodeLimits &limits, Observation *out, std::string *error)
{
  *out = Observation ();
  error->clear ();
  if (size > limits.max_message) {
    *error = "the message has " + std::to_string (size) + " bytes; the server takes at most " +
             std::to_string (limits.max_message);
    return false;
  }
  /* Counts and depth bounded before anything is built: a message of a million empty arrays is
   * refused, not expanded into a million objects. */
  const msgpack::unpack_limit limit (/*array*/ 64, /*map*/ 64, /*str*/ limits.max_message,
                                     /*bin*/ limits.max_message, /*ext*/ 0, /*depth*/ 8);
  msgpack::object_handle oh;
  try {
    std::size_t off = 0;
    oh = msgpack::unpack (reinterpret_cast<const char *> (data), size, off, reference_all, nullptr,
                          limit);
    if (off != size) {
      *error = "malformed msgpack: " + std::to_string (size - off) + " bytes after the observation";
      return false;
    }
  } catch (const msgpack::size_overflow &e) {
    *error = std::string ("the msgpack message exceeds the server's limits (") + e.what () + ")";
    return false;
  } catch (const std::exception &e) {
    *error = std::string ("malformed msgpack: ") + e.what ();
    return false;
  }
  const msgpack::object &root = oh.get ();
  if (root.type != msgpack::type::MAP) {
    *error = "the observation must be a msgpack map (a dict of observation keys)";
    return false;
  }
  Walker w (mapping, limits, out, error);
  KeyPath prefix;
  if (!w.walk (root, prefix) || !w.finish ()) {
    *out = Observation ();
    return false;
  }
  return true;
}

std::string
encode_actions (const float *actions, int horizon, int dim, int stride, const Timing &timing)
{
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk (buf);
  const int n_timing_groups = (timing.policy_infer_ms >= 0) + (timing.server_infer_ms >= 0);
  pk.pack_map (1 + n_timing_groups);

  pack_key (pk, "actions");
  pk.pack_map (4);
  pack_bin_key (pk, "__ndarray__");
  pk.pack_true ();
  pack_bin_key (pk, "data");
  const uint32_t nbytes = (uint32_t)((size_t)horizon * dim * sizeof (float));
  pk.pack_bin (nbytes);
  if (stride == dim) {
    pk.pack_bin_body (reinterpret_cast<const char *> (actions), nbytes);
  } else {
    for (int r = 0; r < horizon; r++)
      buf.write (reinterpret_cast<const char *> (actions + (size_t)r * stride),
                 (size_t)dim * sizeof (float));
  }
  pack_bin_key (pk, "dtype");
  pk.pack_str (3);
  pk.pack_str_body ("<f4", 3);
  pack_bin_key (pk, "shape");
  pk.pack_array (2);
  pk.pack_uint32 ((uint32_t)horizon);
  pk.pack_uint32 ((uint32_t)dim);

  if (timing.policy_infer_ms >= 0) {
    pack_key (pk, "policy_timing");
    pk.pack_map (1);
    pack_key (pk, "infer_ms");
    pack_float64 (buf, timing.policy_infer_ms);
  }
  if (timing.server_infer_ms >= 0) {
    pack_key (pk, "server_timing");
    pk.pack_map (timing.prev_total_ms >= 0 ? 2 : 1);
    pack_key (pk, "infer_ms");
    pack_float64 (buf, timing.server_infer_ms);
    if (timing.prev_total_ms >= 0) {
      pack_key (pk, "prev_total_ms");
      pack_float64 (buf, timing.prev_total_ms);
    }
  }
  return std::string (buf.data (), buf.size ());
}

bool
encode_metadata (const std::string &json_text, std::string *out, std::string *error)
{
  auto doc = json::parse_strict_ordered (json_text.empty () ? "{}" : json_text, "metadata", error);
  if (!doc)
    return false;
  if (!doc->is_object ()) {
    *error = "metadata: must be a JSON object";
    return false;
  }
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk (buf);
  pack_json (pk, buf, *doc);
  out->assign (buf.data (), buf.size ());
  return true;
}

bool
decode_actions (const uint8_t *data, size_t size, int *horizon, int *dim,
                std::vector<float> *values, Timing *timing, std::string *error)
{
  msgpack::object_handle oh;
  try {
    oh = msgpack::unpack (reinterpret_cast<const char *> (data), size);
  } catch (const std::exception &e) {
    *error = std::string ("malformed msgpack: ") + e.what ();
    return false;
  }
  const msgpack::object &root = oh.get ();
  if (root.type != msgpack::type::MAP) {
    *error = "not a map";
    return false;
  }
  *timing = Timing ();
  bool have = false;
  for (uint32_t i = 0; i < root.via.map.size; i++) {
    std::string k;
    if (!as_text (root.via.map.ptr[i].key, &k))
      continue;
    const msgpack::object &v = root.via.map.ptr[i].val;
    if (k == "actions") {
      Array a;
      if (read_array (v, "actions", &a, error) != Shape::kArray || a.scalar ||
          a.shape.size () != 2 || std::string (a.dtype->name) != "<f4") {
        if (error->empty ())
          *error = "actions: not a float32 [H,D] array";
        return false;
      }
      *horizon = (int)a.shape[0];
      *dim = (int)a.shape[1];
      values->resize (a.count ());
      memcpy (values->data (), a.data, a.nbytes);
      have = true;
    } else if ((k == "server_timing" || k == "policy_timing") && v.type == msgpack::type::MAP) {
      for (uint32_t j = 0; j < v.via.map.size; j++) {
        std::string tk;
        double d;
        if (!as_text (v.via.map.ptr[j].key, &tk) || !number (v.via.map.ptr[j].val, &d))
          continue;
        if (k == "policy_timing" && tk == "infer_ms")
          timing->policy_infer_ms = d;
        else if (tk == "infer_ms")
          timing->server_infer_ms = d;
        else if (tk == "prev_total_ms")
          timing->prev_total_ms = d;
      }
    }
  }
  if (!have)
    *error = "no actions";
  return have;
}

} // namespace pi0::serve
