/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "common/pi0json.h"

#include "common/pi0file.h"

#include <cmath>
#include <limits>
#include <set>

namespace pi0::json
{

namespace
{

/* JSON Pointer escaping (RFC 6901) of one path component, for messages. */
std::string
escape_pointer (const std::string &s)
{
  std::string out;
  for (char c : s) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

/* The deepest nesting of arrays and objects in @text, scanning outside strings only; stops
 * counting (returns past @limit) as soon as @limit is passed. Linear time, no allocation. */
size_t
nesting_depth (const std::string &text, size_t limit, size_t *where)
{
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size (); i++) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > limit) {
          *where = i;
          return deepest;
        }
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return deepest;
}

} // namespace

std::optional<Value>
parse_strict (const std::string &text, const std::string &source, std::string *error)
{
  /* Depth first: nlohmann parses deep nesting iteratively, but what is built from it (and
   * every reader walking it) is not meant for a thousand levels. */
  size_t where = 0;
  if (nesting_depth (text, kMaxNesting, &where) > kMaxNesting) {
    if (error)
      *error = source + ": arrays and objects nested more than " + std::to_string (kMaxNesting) +
               " deep (at byte " + std::to_string (where) + "); refusing the file";
    return std::nullopt;
  }
  /* One entry per open object or array: the keys seen so far (objects) and where it is in its
   * parent. The path of the object with a duplicate key is built from these only then, so the
   * memory is linear in the text whatever its shape. */
  struct Open {
    bool object;
    std::set<std::string> keys;
    std::string last_key;
    size_t index = 0;
  };
  std::vector<Open> open;
  std::string duplicate, duplicate_at;
  auto path_of_top = [&] () {
    std::string path;
    for (size_t i = 0; i + 1 < open.size (); i++)
      path += "/" +
              (open[i].object ? escape_pointer (open[i].last_key) : std::to_string (open[i].index));
    return path.empty () ? std::string ("/") : path;
  };
  auto callback = [&] (int, Value::parse_event_t ev, Value &parsed) {
    using E = Value::parse_event_t;
    switch (ev) {
      case E::object_start:
      case E::array_start:
        open.push_back (Open{ev == E::object_start, {}, {}});
        break;
      case E::object_end:
      case E::array_end:
        if (!open.empty ())
          open.pop_back ();
        if (!open.empty () && !open.back ().object)
          open.back ().index++;
        break;
      case E::key:
        if (!open.empty () && parsed.is_string ()) {
          Open &o = open.back ();
          o.last_key = parsed.get<std::string> ();
          if (!o.keys.insert (o.last_key).second && duplicate.empty ()) {
            duplicate = o.last_key;
            duplicate_at = path_of_top ();
          }
        }
        break;
      case E::value:
        if (!open.empty () && !open.back ().object)
          open.back ().index++;
        break;
    }
    return true;
  };
  Value v;
  try {
    v = Value::parse (text, callback);
  } catch (const Value::exception &e) {
    /* nlohmann's what() starts with "[json.exception.parse_error.101] ": keep the part a user
     * can read. */
    std::string what = e.what ();
    const size_t cut = what.find ("] ");
    if (error)
      *error =
          source + ": not valid JSON: " + (cut == std::string::npos ? what : what.substr (cut + 2));
    return std::nullopt;
  }
  if (!duplicate.empty ()) {
    if (error)
      *error = source + ": the same object has the key '" + duplicate + "' more than once (at " +
               duplicate_at + "); refusing an ambiguous file";
    return std::nullopt;
  }
  return v;
}

std::optional<OrderedValue>
parse_strict_ordered (const std::string &text, const std::string &source, std::string *error)
{
  /* The checks (depth, duplicate keys) are parse_strict's; the text then parses as is. */
  if (!parse_strict (text, source, error))
    return std::nullopt;
  return OrderedValue::parse (text);
}

std::optional<Value>
load_strict (const std::string &path, std::string *error, size_t max_bytes)
{
  std::string text;
  if (!read_regular_file (path, max_bytes, &text, error))
    return std::nullopt;
  return parse_strict (text, path, error);
}

bool
to_float (const Value &v, const std::string &what, float *out, std::string *error)
{
  if (!v.is_number ()) {
    if (error)
      *error = what + " is not a number (found " + v.dump () + ")";
    return false;
  }
  const double d = v.get<double> ();
  if (!std::isfinite (d) || std::fabs (d) > (double)std::numeric_limits<float>::max ()) {
    if (error)
      *error = what + " is not a finite float (" + v.dump () + " is outside float32's range)";
    return false;
  }
  *out = (float)d;
  return true;
}

bool
to_float_array (const Value &v, const std::string &what, std::vector<float> *out,
                std::string *error)
{
  if (!v.is_array ()) {
    if (error)
      *error = what + " must be an array of numbers, found " + std::string (v.type_name ());
    return false;
  }
  std::vector<float> r (v.size ());
  for (size_t i = 0; i < v.size (); i++)
    if (!to_float (v[i], what + "[" + std::to_string (i) + "]", &r[i], error))
      return false;
  *out = std::move (r);
  return true;
}

} // namespace pi0::json
