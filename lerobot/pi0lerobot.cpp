/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* LeRobotDataset v3: the files, their schemas and the order they are written in. The schemas
 * are those lerobot 0.6.1 writes (datasets/dataset_writer.py, dataset_metadata.py and
 * io_utils.py of the lerobot package) and its loader reads:
 *   data:     observation.state, action: fixed_size_list<float>[dim]; timestamp: float;
 *             frame_index, episode_index, index, task_index: int64; one row group per episode;
 *             the `huggingface` schema metadata that the `datasets` library writes.
 *   episodes: episode_index, tasks: list<string>, length, data/{chunk,file}_index, dataset_from/to_index,
 *             videos/<key>/{chunk_index,file_index: int64, from/to_timestamp: double},
 *             stats/<feature>/<stat>: list<double> (images: [3][1][1]), count: list<int64>,
 *             meta/episodes/{chunk_index,file_index}.
 *   tasks:    task_index: int64, task: string, with the pandas metadata that makes `task` the
 *             index (load_tasks() reads it with pandas and looks tasks up by that index).
 * Compression: snappy, as LeRobot's writers. */
#include "lerobot/pi0lerobot.h"

#include "common/pi0atomicfile.h"
#include "common/pi0json.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace pi0::lerobot
{

namespace
{

using OJson = nlohmann::ordered_json;

constexpr int64_t kChunksSize = 1000;
constexpr const char *kStatNames[10] = {"min", "max", "mean", "std", "count",
                                        "q01", "q10", "q50",  "q90", "q99"};
constexpr const char *kDefaultInts[4] = {"frame_index", "episode_index", "index", "task_index"};

std::string
chunk_file (int64_t idx)
{
  char b[64];
  std::snprintf (b, sizeof b, "chunk-%03lld/file-%03lld", (long long)(idx / kChunksSize),
                 (long long)(idx % kChunksSize));
  return b;
}

int64_t
flat_index (int64_t chunk, int64_t file)
{
  return chunk * kChunksSize + file;
}

bool
fail (std::string *error, const std::string &msg)
{
  if (error)
    *error = msg;
  return false;
}

/* A file of the dataset, whole or not at all (common/pi0atomicfile.h). Its temporary file is
 * @dst + ".part": what a crash leaves of it is found by that suffix and removed by Writer::open. */
bool
write_atomic (const fs::path &dst, const pi0::FileWriter &write, std::string *error)
{
  std::error_code ec;
  fs::create_directories (dst.parent_path (), ec);
  return pi0::write_file_atomic (dst.string (), dst.string () + ".part", write, error);
}

bool
write_text_atomic (const fs::path &dst, const std::string &text, std::string *error)
{
  return write_atomic (
      dst,
      [&] (int fd, std::string *why) {
        return pi0::write_all (fd, text.data (), text.size (), why);
      },
      error);
}

bool
write_parquet_atomic (const fs::path &dst, const std::shared_ptr<arrow::Table> &table,
                      std::string *error)
{
  return write_atomic (
      dst,
      [&] (int fd, std::string *why) {
        /* Arrow closes the descriptor it writes through: it gets a copy. Until it is opened, the
         * copy is still ours to close. */
        const int own = ::dup (fd);
        if (own < 0)
          return fail (why, std::string ("cannot write: ") + std::strerror (errno));
        auto out = arrow::io::FileOutputStream::Open (own);
        if (!out.ok ()) {
          ::close (own);
          return fail (why, "cannot write: " + out.status ().ToString ());
        }
        auto props = parquet::WriterProperties::Builder ()
                         .compression (parquet::Compression::SNAPPY)
                         ->build ();
        /* store_schema: the Arrow schema and its metadata (pandas', the datasets library's) go
         * into the file, as pyarrow writes them; pandas needs its metadata to restore the tasks'
         * index. */
        auto arrow_props = parquet::ArrowWriterProperties::Builder ().store_schema ()->build ();
        auto st = parquet::arrow::WriteTable (*table, arrow::default_memory_pool (), *out,
                                              std::max<int64_t> (table->num_rows (), 1), props,
                                              arrow_props);
        if (st.ok ())
          st = (*out)->Close ();
        if (!st.ok ())
          return fail (why, "cannot write: " + st.ToString ());
        return true;
      },
      error);
}

std::shared_ptr<arrow::Table>
read_parquet (const fs::path &p, std::string *error)
{
  auto in = arrow::io::ReadableFile::Open (p.string ());
  if (!in.ok ()) {
    fail (error, "cannot open " + p.string () + ": " + in.status ().ToString ());
    return nullptr;
  }
  auto reader = parquet::arrow::OpenFile (*in, arrow::default_memory_pool ());
  if (!reader.ok ()) {
    fail (error, p.string () + " is not a readable Parquet file: " + reader.status ().ToString ());
    return nullptr;
  }
  auto t = (*reader)->ReadTable ();
  if (!t.ok ()) {
    fail (error, "cannot read " + p.string () + ": " + t.status ().ToString ());
    return nullptr;
  }
  auto comb = (*t)->CombineChunks ();
  if (!comb.ok ()) {
    fail (error, "cannot read " + p.string () + ": " + comb.status ().ToString ());
    return nullptr;
  }
  return *comb;
}

/* Column @name of @t as one array, or nullptr with a message. */
std::shared_ptr<arrow::Array>
column (const std::shared_ptr<arrow::Table> &t, const std::string &name, const fs::path &file,
        std::string *error)
{
  auto c = t->GetColumnByName (name);
  if (!c || c->num_chunks () != 1) {
    if (!c)
      fail (error, file.string () + " has no column '" + name + "'");
    else if (c->num_chunks () == 0)
      return arrow::MakeArrayOfNull (c->type (), 0).ValueOr (nullptr);
    else
      fail (error, file.string () + ": column '" + name + "' in several chunks");
    return nullptr;
  }
  return c->chunk (0);
}

bool
int64_at (const std::shared_ptr<arrow::Array> &a, int64_t row, int64_t *out)
{
  if (a->type_id () != arrow::Type::INT64 || a->IsNull (row))
    return false;
  *out = std::static_pointer_cast<arrow::Int64Array> (a)->Value (row);
  return true;
}

bool
double_at (const std::shared_ptr<arrow::Array> &a, int64_t row, double *out)
{
  if (a->IsNull (row))
    return false;
  if (a->type_id () == arrow::Type::DOUBLE)
    *out = std::static_pointer_cast<arrow::DoubleArray> (a)->Value (row);
  else if (a->type_id () == arrow::Type::FLOAT)
    *out = std::static_pointer_cast<arrow::FloatArray> (a)->Value (row);
  else
    return false;
  return true;
}

/* All numbers of a (possibly nested) list cell, flattened. */
bool
flatten_numbers (const std::shared_ptr<arrow::Array> &a, int64_t row, std::vector<double> *out)
{
  std::shared_ptr<arrow::Array> cur = a;
  int64_t start = row, len = 1;
  while (cur->type_id () == arrow::Type::LIST || cur->type_id () == arrow::Type::FIXED_SIZE_LIST ||
         cur->type_id () == arrow::Type::LARGE_LIST) {
    if (cur->type_id () == arrow::Type::LIST) {
      auto l = std::static_pointer_cast<arrow::ListArray> (cur);
      const int64_t s = l->value_offset (start), e = l->value_offset (start + len);
      start = s;
      len = e - s;
      cur = l->values ();
    } else if (cur->type_id () == arrow::Type::LARGE_LIST) {
      auto l = std::static_pointer_cast<arrow::LargeListArray> (cur);
      const int64_t s = l->value_offset (start), e = l->value_offset (start + len);
      start = s;
      len = e - s;
      cur = l->values ();
    } else {
      auto l = std::static_pointer_cast<arrow::FixedSizeListArray> (cur);
      const int64_t s = l->value_offset (start), e = l->value_offset (start + len);
      start = s;
      len = e - s;
      cur = l->values ();
    }
  }
  out->clear ();
  for (int64_t i = start; i < start + len; i++) {
    double v;
    if (cur->type_id () == arrow::Type::INT64) {
      int64_t x;
      if (!int64_at (cur, i, &x))
        return false;
      v = (double)x;
    } else if (!double_at (cur, i, &v)) {
      return false;
    }
    out->push_back (v);
  }
  return true;
}

/* ---- info.json ----------------------------------------------------------------------- */

OJson
vector_feature (const std::vector<std::string> &names)
{
  OJson f;
  f["dtype"] = "float32";
  f["shape"] = OJson::array ({(int64_t)names.size ()});
  f["names"] = names;
  return f;
}

OJson
features_json (const Schema &s)
{
  OJson f = OJson::object ();
  f["observation.state"] = vector_feature (s.state_names);
  f["action"] = vector_feature (s.action_names);
  for (auto &c : s.cameras) {
    OJson v;
    v["dtype"] = "video";
    v["shape"] = OJson::array ({c.height, c.width, 3});
    v["names"] = OJson::array ({"height", "width", "channels"});
    OJson info;
    info["video.height"] = c.height;
    info["video.width"] = c.width;
    info["video.codec"] = c.codec;
    info["video.pix_fmt"] = c.pix_fmt;
    info["video.fps"] = s.fps;
    info["video.channels"] = 3;
    info["has_audio"] = false;
    /* The encoder keys LeRobot 0.6.1's writer adds (VIDEO_ENCODER_INFO_FIELD_NAMES). */
    info["video.g"] = c.gop > 0 ? OJson (c.gop) : OJson (nullptr);
    info["video.crf"] = c.crf >= 0 ? OJson (c.crf) : OJson (nullptr);
    info["video.preset"] = c.preset.empty () ? OJson (nullptr) : OJson (c.preset);
    info["video.fast_decode"] = 0;
    info["video.video_backend"] = "pyav";
    info["video.extra_options"] = OJson::object ();
    info["is_depth_map"] = false;
    v["info"] = info;
    f[c.key] = v;
  }
  OJson ts;
  ts["dtype"] = "float32";
  ts["shape"] = OJson::array ({1});
  ts["names"] = nullptr;
  f["timestamp"] = ts;
  for (const char *k : kDefaultInts) {
    OJson i;
    i["dtype"] = "int64";
    i["shape"] = OJson::array ({1});
    i["names"] = nullptr;
    f[k] = i;
  }
  return f;
}

/* The feature keys in file order: what stats and episode rows iterate over. */
std::vector<std::string>
feature_keys (const Schema &s)
{
  std::vector<std::string> k = {"observation.state", "action"};
  for (auto &c : s.cameras)
    k.push_back (c.key);
  k.push_back ("timestamp");
  for (const char *d : kDefaultInts)
    k.push_back (d);
  return k;
}

OJson
stats_json (const Stats &s, bool image)
{
  auto arr = [&] (const std::vector<double> &v) {
    OJson a = OJson::array ();
    for (double x : v)
      a.push_back (image ? OJson::array ({OJson::array ({x})}) : OJson (x));
    return a;
  };
  OJson o;
  o["min"] = arr (s.min);
  o["max"] = arr (s.max);
  o["mean"] = arr (s.mean);
  o["std"] = arr (s.std);
  o["count"] = OJson::array ({s.count});
  o["q01"] = arr (s.q01);
  o["q10"] = arr (s.q10);
  o["q50"] = arr (s.q50);
  o["q90"] = arr (s.q90);
  o["q99"] = arr (s.q99);
  return o;
}

const std::vector<double> &
stat_field (const Stats &s, int i)
{
  switch (i) {
    case 0:
      return s.min;
    case 1:
      return s.max;
    case 2:
      return s.mean;
    case 3:
      return s.std;
    case 5:
      return s.q01;
    case 6:
      return s.q10;
    case 7:
      return s.q50;
    case 8:
      return s.q90;
    default:
      return s.q99;
  }
}

std::vector<double> &
stat_field (Stats &s, int i)
{
  return const_cast<std::vector<double> &> (stat_field ((const Stats &)s, i));
}

/* ---- Arrow table builders ------------------------------------------------------------ */

#define PI0_TRY(expr)                                                                              \
  do {                                                                                             \
    arrow::Status _s = (expr);                                                                     \
    if (!_s.ok ())                                                                                 \
      throw std::runtime_error (_s.ToString ());                                                   \
  } while (0)

std::shared_ptr<arrow::Array>
finish (arrow::ArrayBuilder &b)
{
  std::shared_ptr<arrow::Array> a;
  PI0_TRY (b.Finish (&a));
  return a;
}

std::shared_ptr<arrow::Array>
float_lists (const std::vector<float> &v, int32_t dim, size_t n)
{
  auto vals = std::make_shared<arrow::FloatBuilder> ();
  arrow::FixedSizeListBuilder b (
      arrow::default_memory_pool (), vals,
      arrow::fixed_size_list (arrow::field ("element", arrow::float32 ()), dim));
  for (size_t i = 0; i < n; i++) {
    PI0_TRY (b.Append ());
    PI0_TRY (vals->AppendValues (v.data () + i * dim, dim));
  }
  return finish (b);
}

std::shared_ptr<arrow::Array>
int64s (const std::vector<int64_t> &v)
{
  arrow::Int64Builder b;
  PI0_TRY (b.AppendValues (v));
  return finish (b);
}

/* list<T> with the child named "element", as the `datasets` library writes lists. */
std::shared_ptr<arrow::DataType>
list_of (const std::shared_ptr<arrow::DataType> &t)
{
  return arrow::list (arrow::field ("element", t));
}

/* list<double> per row (depth 1), or list<list<list<double>>> with [c][1][1] (images). */
std::shared_ptr<arrow::Array>
stat_column (const std::vector<const std::vector<double> *> &rows, bool image)
{
  auto leaf = std::make_shared<arrow::DoubleBuilder> ();
  if (!image) {
    arrow::ListBuilder b (arrow::default_memory_pool (), leaf, list_of (arrow::float64 ()));
    for (auto *r : rows) {
      PI0_TRY (b.Append ());
      PI0_TRY (leaf->AppendValues (*r));
    }
    return finish (b);
  }
  auto t2 = list_of (arrow::float64 ()), t1 = list_of (t2);
  auto l2 = std::make_shared<arrow::ListBuilder> (arrow::default_memory_pool (), leaf, t2);
  auto l1 = std::make_shared<arrow::ListBuilder> (arrow::default_memory_pool (), l2, t1);
  arrow::ListBuilder b (arrow::default_memory_pool (), l1, list_of (t1));
  for (auto *r : rows) {
    PI0_TRY (b.Append ());
    for (double x : *r) {
      PI0_TRY (l1->Append ());
      PI0_TRY (l2->Append ());
      PI0_TRY (leaf->Append (x));
    }
  }
  return finish (b);
}

std::shared_ptr<arrow::Array>
count_column (const std::vector<int64_t> &counts)
{
  auto leaf = std::make_shared<arrow::Int64Builder> ();
  arrow::ListBuilder b (arrow::default_memory_pool (), leaf, list_of (arrow::int64 ()));
  for (int64_t c : counts) {
    PI0_TRY (b.Append ());
    PI0_TRY (leaf->Append (c));
  }
  return finish (b);
}

/* The schema metadata the `datasets` library writes: its Features, which the loader would
 * otherwise infer. */
std::shared_ptr<arrow::KeyValueMetadata>
hf_metadata (const Schema &s)
{
  OJson feats = OJson::object ();
  auto vec = [] (size_t n) {
    OJson f;
    f["feature"] = {{"dtype", "float32"}, {"_type", "Value"}};
    f["length"] = n;
    f["_type"] = "List";
    return f;
  };
  feats["observation.state"] = vec (s.state_names.size ());
  feats["action"] = vec (s.action_names.size ());
  feats["timestamp"] = {{"dtype", "float32"}, {"_type", "Value"}};
  for (const char *k : kDefaultInts)
    feats[k] = {{"dtype", "int64"}, {"_type", "Value"}};
  OJson md;
  md["info"] = {{"features", feats}};
  return arrow::key_value_metadata ({"huggingface"}, {md.dump ()});
}

/* One committed (or committing) episode row. */
struct Row {
  EpisodeInfo info;
  int64_t meta_chunk = 0, meta_file = 0;
  std::vector<Stats> stats; /* per feature_keys() */
};

/* A whole number in [lo, hi] at @v (an integer, or a float with no fraction), or false with a
 * message naming @what: hostile files give messages, never exceptions or huge allocations. */
bool
whole_number (const pi0::json::Value &v, int64_t lo, int64_t hi, const std::string &what,
              int64_t *out, std::string *error)
{
  if (v.is_number_integer ()) {
    const int64_t i = v.is_number_unsigned () && v.get<uint64_t> () > (uint64_t)INT64_MAX
                          ? INT64_MAX
                          : v.get<int64_t> ();
    if (i >= lo && i <= hi) {
      *out = i;
      return true;
    }
  } else if (v.is_number_float ()) {
    const double d = v.get<double> ();
    if (std::isfinite (d) && d == std::floor (d) && d >= (double)lo && d <= (double)hi) {
      *out = (int64_t)d;
      return true;
    }
    if (std::isfinite (d) && d != std::floor (d))
      return fail (error, what + " is " + v.dump () + ", not a whole number");
  } else {
    return fail (error, what + " is " + v.dump () + ", not a number");
  }
  return fail (error, what + " is " + v.dump () + ", outside " + std::to_string (lo) + ".." +
                          std::to_string (hi));
}

/* Bounds of what a dataset may declare (far beyond any robot's, far below what would exhaust
 * memory): a vector feature's size, a camera's side, fps, episodes and frames. */
constexpr int64_t kMaxDim = 4096;
constexpr int64_t kMaxSide = 16384;
constexpr int64_t kMaxFps = 1000;
constexpr int64_t kMaxCount = (int64_t)1 << 40;

bool
parse_features (const pi0::json::Value &info, Schema *s, std::string *error)
{
  if (!info.is_object () || !info.contains ("features") || !info["features"].is_object ())
    return fail (error, "info.json has no features");
  for (auto it = info["features"].begin (); it != info["features"].end (); ++it) {
    const auto &f = it.value ();
    const std::string name = "info.json: feature '" + it.key () + "'";
    if (!f.is_object ())
      return fail (error, name + " is not an object");
    const std::string dtype =
        f.contains ("dtype") && f["dtype"].is_string () ? f["dtype"].get<std::string> () : "";
    const bool shaped = f.contains ("shape") && f["shape"].is_array ();
    if (dtype == "video" || dtype == "image") {
      if (dtype == "image")
        return fail (error, name + " is stored as images; only video datasets are supported");
      Camera c;
      c.key = it.key ();
      if (!shaped || f["shape"].size () != 3)
        return fail (error, name + " has no [height, width, channels] shape");
      /* LeRobot writes [height, width, channels]; datasets converted from older versions may
       * say [channels, height, width] in their names. */
      int hi = 0, wi = 1, ci = 2;
      if (f.contains ("names") && f["names"].is_array () && f["names"].size () == 3 &&
          f["names"][0].is_string () && f["names"][0].get<std::string> ().rfind ("channel", 0) == 0) {
        ci = 0;
        hi = 1;
        wi = 2;
      }
      int64_t h, w, ch;
      if (!whole_number (f["shape"][hi], 1, kMaxSide, name + " height", &h, error) ||
          !whole_number (f["shape"][wi], 1, kMaxSide, name + " width", &w, error) ||
          !whole_number (f["shape"][ci], 1, 4, name + " channels", &ch, error))
        return false;
      if (ch != 3)
        return fail (error, name + " has " + std::to_string (ch) +
                                " channels; only RGB (3-channel) cameras are played");
      c.height = (int)h;
      c.width = (int)w;
      if (f.contains ("info") && f["info"].is_object ()) {
        const auto &vi = f["info"];
        if (vi.contains ("video.codec") && vi["video.codec"].is_string ())
          c.codec = vi["video.codec"].get<std::string> ();
        else
          c.codec = "";
        if (vi.contains ("video.pix_fmt") && vi["video.pix_fmt"].is_string ())
          c.pix_fmt = vi["video.pix_fmt"].get<std::string> ();
      }
      s->cameras.push_back (c);
    } else if (it.key () == "observation.state" || it.key () == "action") {
      if (!shaped || f["shape"].size () != 1)
        return fail (error, name + " is not a vector (its shape is not [n])");
      int64_t n;
      if (!whole_number (f["shape"][0], 1, kMaxDim, name + " size", &n, error))
        return false;
      std::vector<std::string> names;
      if (f.contains ("names") && f["names"].is_array ())
        for (auto &nm : f["names"])
          names.push_back (nm.is_string () ? nm.get<std::string> () : "");
      names.resize ((size_t)n);
      (it.key () == "action" ? s->action_names : s->state_names) = names;
    }
  }
  if (!info.contains ("fps"))
    return fail (error, "info.json has no fps");
  int64_t fps;
  if (!whole_number (info["fps"], 1, kMaxFps, "info.json: fps", &fps, error))
    return false;
  s->fps = (int)fps;
  if (info.contains ("robot_type") && info["robot_type"].is_string ())
    s->robot_type = info["robot_type"].get<std::string> ();
  if (s->state_names.empty () || s->action_names.empty ())
    return fail (error, "the dataset has no observation.state or action feature");
  return true;
}

/* A string list cell (list or large_list of string or large_string), or false. */
bool
strings_at (const std::shared_ptr<arrow::Array> &a, int64_t row, std::vector<std::string> *out)
{
  std::shared_ptr<arrow::Array> values;
  int64_t b = 0, e = 0;
  if (a->IsNull (row))
    return true;
  if (a->type_id () == arrow::Type::LIST) {
    auto l = std::static_pointer_cast<arrow::ListArray> (a);
    b = l->value_offset (row);
    e = l->value_offset (row + 1);
    values = l->values ();
  } else if (a->type_id () == arrow::Type::LARGE_LIST) {
    auto l = std::static_pointer_cast<arrow::LargeListArray> (a);
    b = l->value_offset (row);
    e = l->value_offset (row + 1);
    values = l->values ();
  } else {
    return false;
  }
  for (int64_t i = b; i < e; i++) {
    if (values->type_id () == arrow::Type::STRING)
      out->push_back (std::static_pointer_cast<arrow::StringArray> (values)->GetString (i));
    else if (values->type_id () == arrow::Type::LARGE_STRING)
      out->push_back (std::static_pointer_cast<arrow::LargeStringArray> (values)->GetString (i));
    else
      return false;
  }
  return true;
}

/* A string cell (string or large_string), or false. */
bool
string_at (const std::shared_ptr<arrow::Array> &a, int64_t row, std::string *out)
{
  if (a->IsNull (row))
    return false;
  if (a->type_id () == arrow::Type::STRING)
    *out = std::static_pointer_cast<arrow::StringArray> (a)->GetString (row);
  else if (a->type_id () == arrow::Type::LARGE_STRING)
    *out = std::static_pointer_cast<arrow::LargeStringArray> (a)->GetString (row);
  else
    return false;
  return true;
}

/* An episode row that cannot be played as it says: negative or inconsistent indices, video
 * windows that are not finite, reversed, or too short for the episode's frames. */
bool
check_row (const Row &row, const Schema &schema, const fs::path &file, std::string *error)
{
  const EpisodeInfo &e = row.info;
  const std::string where = file.string () + ": episode " + std::to_string (e.index);
  if (e.index < 0 || e.index > kMaxCount)
    return fail (error, file.string () + ": episode_index " + std::to_string (e.index) +
                            " is out of range");
  if (e.length < 1 || e.length > kMaxCount)
    return fail (error, where + ": length " + std::to_string (e.length) + " is out of range");
  if (e.from < 0 || e.to != e.from + e.length)
    return fail (error, where + ": dataset_from_index " + std::to_string (e.from) +
                            " and dataset_to_index " + std::to_string (e.to) +
                            " do not span its length " + std::to_string (e.length));
  for (int64_t v : {e.data_chunk, e.data_file, row.meta_chunk, row.meta_file})
    if (v < 0 || v >= kChunksSize * kChunksSize)
      return fail (error, where + ": a chunk or file index is out of range");
  for (size_t c = 0; c < e.videos.size (); c++) {
    const auto &v = e.videos[c];
    const std::string key = "videos/" + schema.cameras[c].key;
    if (v.chunk < 0 || v.file < 0 || v.chunk >= kChunksSize || v.file >= kChunksSize * kChunksSize)
      return fail (error, where + ": " + key + " chunk or file index is out of range");
    if (!std::isfinite (v.from_ts) || !std::isfinite (v.to_ts) || v.from_ts < 0)
      return fail (error, where + ": " + key + "/from_timestamp and to_timestamp must be finite and "
                                                "not negative");
    if (v.to_ts <= v.from_ts)
      return fail (error, where + ": " + key + "/to_timestamp is not after from_timestamp");
    /* LeRobot's window is the episode's duration: it must hold the frames (a frame and a
     * half of slack for rounding). */
    if ((v.to_ts - v.from_ts) * schema.fps < (double)e.length - 1.5)
      return fail (error, where + ": " + key + " spans " + std::to_string (v.to_ts - v.from_ts) +
                              " s, too short for its " + std::to_string (e.length) +
                              " frames at " + std::to_string (schema.fps) + " fps");
  }
  return true;
}

/* Reads every meta/episodes file (sorted, as LeRobot's loader) into rows. */
bool
read_episode_rows (const fs::path &root, const Schema &schema, std::vector<Row> *rows,
                   std::string *error)
{
  const fs::path dir = root / "meta" / "episodes";
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory (dir, ec))
    for (auto &c : fs::directory_iterator (dir, ec))
      if (c.is_directory ())
        for (auto &f : fs::directory_iterator (c.path (), ec))
          if (f.path ().extension () == ".parquet")
            files.push_back (f.path ());
  std::sort (files.begin (), files.end ());
  const auto keys = feature_keys (schema);
  for (auto &file : files) {
    auto t = read_parquet (file, error);
    if (!t)
      return false;
    auto col = [&] (const std::string &n) {
      return column (t, n, file, error);
    };
    auto ep = col ("episode_index"), len = col ("length"), dc = col ("data/chunk_index"),
         df = col ("data/file_index"), from = col ("dataset_from_index"),
         to = col ("dataset_to_index"), mc = col ("meta/episodes/chunk_index"),
         mf = col ("meta/episodes/file_index"), tasks = col ("tasks");
    if (!ep || !len || !dc || !df || !from || !to || !mc || !mf || !tasks)
      return false;
    std::vector<std::shared_ptr<arrow::Array>> vc, vf, vfrom, vto;
    for (auto &c : schema.cameras) {
      vc.push_back (col ("videos/" + c.key + "/chunk_index"));
      vf.push_back (col ("videos/" + c.key + "/file_index"));
      vfrom.push_back (col ("videos/" + c.key + "/from_timestamp"));
      vto.push_back (col ("videos/" + c.key + "/to_timestamp"));
      if (!vc.back () || !vf.back () || !vfrom.back () || !vto.back ())
        return false;
    }
    for (int64_t r = 0; r < t->num_rows (); r++) {
      Row row;
      EpisodeInfo &e = row.info;
      bool ok = int64_at (ep, r, &e.index) && int64_at (len, r, &e.length) &&
                int64_at (dc, r, &e.data_chunk) && int64_at (df, r, &e.data_file) &&
                int64_at (from, r, &e.from) && int64_at (to, r, &e.to) &&
                int64_at (mc, r, &row.meta_chunk) && int64_at (mf, r, &row.meta_file);
      for (size_t c = 0; ok && c < schema.cameras.size (); c++) {
        EpisodeInfo::Video v;
        ok = int64_at (vc[c], r, &v.chunk) && int64_at (vf[c], r, &v.file) &&
             double_at (vfrom[c], r, &v.from_ts) && double_at (vto[c], r, &v.to_ts);
        e.videos.push_back (v);
      }
      if (!ok)
        return fail (error, file.string () + ": row " + std::to_string (r) +
                                " has a missing or mistyped value");
      if (!strings_at (tasks, r, &e.tasks))
        return fail (error, file.string () + ": 'tasks' of row " + std::to_string (r) +
                                " is not a list of strings");
      if (!check_row (row, schema, file, error))
        return false;
      /* Per-episode stats (absent columns leave them empty: the dataset stats are then
       * taken from stats.json as it is). */
      for (auto &k : keys) {
        Stats s;
        bool have = true;
        for (int i = 0; i < 10 && have; i++) {
          auto c = t->GetColumnByName ("stats/" + k + "/" + kStatNames[i]);
          std::vector<double> v;
          have = c && c->num_chunks () == 1 && flatten_numbers (c->chunk (0), r, &v);
          if (!have)
            break;
          if (i == 4)
            s.count = v.empty () ? 0 : (int64_t)v[0];
          else
            stat_field (s, i) = v;
        }
        row.stats.push_back (have ? s : Stats{});
      }
      rows->push_back (std::move (row));
    }
  }
  return true;
}

bool
read_tasks (const fs::path &root, std::vector<std::string> *tasks, std::string *error)
{
  const fs::path p = root / "meta" / "tasks.parquet";
  std::error_code ec;
  if (!fs::exists (p, ec))
    return true;
  auto t = read_parquet (p, error);
  if (!t)
    return false;
  auto idx = column (t, "task_index", p, error), txt = column (t, "task", p, error);
  if (!idx || !txt)
    return false;
  tasks->assign (t->num_rows (), "");
  for (int64_t r = 0; r < t->num_rows (); r++) {
    int64_t i;
    if (!int64_at (idx, r, &i) || i < 0 || i >= t->num_rows ())
      return fail (error, p.string () + ": task_index is not 0..N-1");
    if (!string_at (txt, r, &(*tasks)[i]))
      return fail (error, p.string () + ": column 'task' is not a string");
  }
  return true;
}

/* info.json's total_episodes, checked against the rows: every episode it counts has a row
 * (rows beyond it are a crash's uncommitted episodes, which are not played). */
bool
committed_episodes (const pi0::json::Value &info, const std::vector<Row> &rows,
                    int64_t *committed, std::string *error)
{
  if (!info.contains ("total_episodes"))
    return fail (error, "info.json has no total_episodes");
  if (!whole_number (info["total_episodes"], 0, kMaxCount, "info.json: total_episodes", committed,
                     error))
    return false;
  std::set<int64_t> seen;
  int64_t frames = 0;
  for (auto &row : rows) {
    if (row.info.index >= *committed)
      continue;
    if (!seen.insert (row.info.index).second)
      return fail (error, "meta/episodes has episode " + std::to_string (row.info.index) +
                              " twice");
    frames += row.info.length;
  }
  if ((int64_t)seen.size () != *committed)
    return fail (error, "info.json: total_episodes is " + std::to_string (*committed) +
                            ", meta/episodes has " + std::to_string (seen.size ()) + " of them");
  int64_t total = 0;
  if (info.contains ("total_frames") &&
      whole_number (info["total_frames"], 0, kMaxCount, "info.json: total_frames", &total,
                    nullptr) &&
      total != frames)
    return fail (error, "info.json: total_frames is " + std::to_string (total) +
                            ", the episodes' lengths add up to " + std::to_string (frames));
  return true;
}

/* ---- Writer ----------------------------------------------------------------------------- */

class WriterImpl : public Writer
{
public:
  fs::path root;
  Schema schema;
  std::vector<Row> rows;    /* committed episodes (those info.json counts) */
  std::vector<Row> session; /* this session's rows (also in rows), in our episodes file */
  std::vector<std::string> tasks;
  int64_t frames = 0;
  int64_t next_data = 0, next_meta = 0;
  std::vector<int64_t> next_video;
  Stats dataset_stats_placeholder;
  pi0::json::Value old_stats; /* stats.json of a dataset whose rows carry no stats */
  bool old_stats_used = false;

  int64_t next_episode () const override { return (int64_t)rows.size (); }
  int64_t total_frames () const override { return frames; }

  std::string video_part_path (size_t cam) const override
  {
    return (root / "videos" / schema.cameras[cam].key /
            (chunk_file (next_video[cam]) + ".mp4.part"))
        .string ();
  }

  void discard () override
  {
    std::error_code ec;
    for (size_t c = 0; c < schema.cameras.size (); c++)
      fs::remove (video_part_path (c), ec);
  }

  bool commit (const Episode &ep, std::string *error) override
  {
    try {
      return commit_impl (ep, error);
    } catch (const std::exception &e) {
      return fail (error, std::string ("cannot write the episode: ") + e.what ());
    }
  }

  int64_t task_index (const std::string &t)
  {
    auto it = std::find (tasks.begin (), tasks.end (), t);
    if (it != tasks.end ())
      return it - tasks.begin ();
    tasks.push_back (t);
    return (int64_t)tasks.size () - 1;
  }

  bool write_tasks (std::string *error)
  {
    arrow::StringBuilder sb;
    std::vector<int64_t> idx;
    for (size_t i = 0; i < tasks.size (); i++) {
      idx.push_back ((int64_t)i);
      PI0_TRY (sb.Append (tasks[i]));
    }
    OJson pandas;
    pandas["index_columns"] = {"task"};
    pandas["column_indexes"] = OJson::array ({OJson{{"name", nullptr},
                                                    {"field_name", nullptr},
                                                    {"pandas_type", "unicode"},
                                                    {"numpy_type", "object"},
                                                    {"metadata", {{"encoding", "UTF-8"}}}}});
    pandas["columns"] = OJson::array ({OJson{{"name", "task_index"},
                                             {"field_name", "task_index"},
                                             {"pandas_type", "int64"},
                                             {"numpy_type", "int64"},
                                             {"metadata", nullptr}},
                                       OJson{{"name", "task"},
                                             {"field_name", "task"},
                                             {"pandas_type", "unicode"},
                                             {"numpy_type", "object"},
                                             {"metadata", nullptr}}});
    pandas["attributes"] = OJson::object ();
    pandas["creator"] = {{"library", "pyarrow"}, {"version", ARROW_VERSION_STRING}};
    pandas["pandas_version"] = "2.3.3";
    auto schema_ = arrow::schema (
        {arrow::field ("task_index", arrow::int64 ()), arrow::field ("task", arrow::utf8 ())},
        arrow::key_value_metadata ({"pandas"}, {pandas.dump ()}));
    auto t = arrow::Table::Make (schema_, {int64s (idx), finish (sb)});
    return write_parquet_atomic (root / "meta" / "tasks.parquet", t, error);
  }

  std::shared_ptr<arrow::Table> episodes_table ()
  {
    std::vector<std::shared_ptr<arrow::Field>> fields;
    std::vector<std::shared_ptr<arrow::Array>> cols;
    auto add = [&] (const std::string &name, std::shared_ptr<arrow::Array> a) {
      fields.push_back (arrow::field (name, a->type ()));
      cols.push_back (std::move (a));
    };
    auto ints = [&] (auto get) {
      std::vector<int64_t> v;
      for (auto &r : session)
        v.push_back (get (r));
      return int64s (v);
    };
    auto doubles = [&] (auto get) {
      arrow::DoubleBuilder b;
      for (auto &r : session)
        PI0_TRY (b.Append (get (r)));
      return finish (b);
    };
    add ("episode_index", ints ([] (const Row &r) { return r.info.index; }));
    {
      auto sb = std::make_shared<arrow::StringBuilder> ();
      arrow::ListBuilder lb (arrow::default_memory_pool (), sb, list_of (arrow::utf8 ()));
      for (auto &r : session) {
        PI0_TRY (lb.Append ());
        for (auto &t : r.info.tasks)
          PI0_TRY (sb->Append (t));
      }
      add ("tasks", finish (lb));
    }
    add ("length", ints ([] (const Row &r) { return r.info.length; }));
    add ("data/chunk_index", ints ([] (const Row &r) { return r.info.data_chunk; }));
    add ("data/file_index", ints ([] (const Row &r) { return r.info.data_file; }));
    add ("dataset_from_index", ints ([] (const Row &r) { return r.info.from; }));
    add ("dataset_to_index", ints ([] (const Row &r) { return r.info.to; }));
    for (size_t c = 0; c < schema.cameras.size (); c++) {
      const std::string p = "videos/" + schema.cameras[c].key + "/";
      add (p + "chunk_index", ints ([c] (const Row &r) { return r.info.videos[c].chunk; }));
      add (p + "file_index", ints ([c] (const Row &r) { return r.info.videos[c].file; }));
      add (p + "from_timestamp", doubles ([c] (const Row &r) { return r.info.videos[c].from_ts; }));
      add (p + "to_timestamp", doubles ([c] (const Row &r) { return r.info.videos[c].to_ts; }));
    }
    const auto keys = feature_keys (schema);
    for (size_t k = 0; k < keys.size (); k++) {
      const bool image = k >= 2 && k < 2 + schema.cameras.size ();
      for (int i = 0; i < 10; i++) {
        const std::string name = "stats/" + keys[k] + "/" + kStatNames[i];
        if (i == 4) {
          std::vector<int64_t> counts;
          for (auto &r : session)
            counts.push_back (r.stats[k].count);
          add (name, count_column (counts));
        } else {
          std::vector<const std::vector<double> *> v;
          for (auto &r : session)
            v.push_back (&stat_field (r.stats[k], i));
          add (name, stat_column (v, image));
        }
      }
    }
    add ("meta/episodes/chunk_index", ints ([] (const Row &r) { return r.meta_chunk; }));
    add ("meta/episodes/file_index", ints ([] (const Row &r) { return r.meta_file; }));
    return arrow::Table::Make (arrow::schema (fields), cols);
  }

  bool write_stats (std::string *error)
  {
    const auto keys = feature_keys (schema);
    OJson out = OJson::object ();
    for (size_t k = 0; k < keys.size (); k++) {
      std::vector<Stats> parts;
      for (auto &r : rows)
        if (k < r.stats.size () && r.stats[k].count > 0)
          parts.push_back (r.stats[k]);
      const bool image = k >= 2 && k < 2 + schema.cameras.size ();
      if (!parts.empty ())
        out[keys[k]] = stats_json (aggregate_stats (parts), image);
    }
    return write_text_atomic (root / "meta" / "stats.json", out.dump (4), error);
  }

  bool write_info (std::string *error)
  {
    OJson info;
    info["codebase_version"] = "v3.0";
    info["fps"] = schema.fps;
    info["features"] = features_json (schema);
    info["total_episodes"] = (int64_t)rows.size ();
    info["total_frames"] = frames;
    info["total_tasks"] = (int64_t)tasks.size ();
    info["chunks_size"] = kChunksSize;
    info["data_files_size_in_mb"] = 100;
    info["video_files_size_in_mb"] = 200;
    info["data_path"] = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet";
    info["video_path"] = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4";
    info["robot_type"] = schema.robot_type.empty () ? OJson (nullptr) : OJson (schema.robot_type);
    info["splits"] = {{"train", "0:" + std::to_string (rows.size ())}};
    return write_text_atomic (root / "meta" / "info.json", info.dump (4), error);
  }

  bool commit_impl (const Episode &ep, std::string *error)
  {
    const size_t n = ep.length, sd = schema.state_names.size (), ad = schema.action_names.size ();
    if (n == 0)
      return fail (error, "an episode needs at least one frame");
    if (ep.state.size () != n * sd || ep.action.size () != n * ad || ep.task.size () != n ||
        ep.camera_stats.size () != schema.cameras.size ())
      return fail (error, "episode data does not match the dataset's features");
    const int64_t e = next_episode ();
    std::error_code ec;
    for (size_t c = 0; c < schema.cameras.size (); c++)
      if (!fs::exists (video_part_path (c), ec))
        return fail (error, "the video of camera '" + schema.cameras[c].key +
                                "' was not written: " + video_part_path (c));

    /* 1. Tasks (a task no committed episode uses is harmless). */
    const size_t ntasks = tasks.size ();
    std::vector<int64_t> task_idx (n);
    std::vector<std::string> ep_tasks;
    for (size_t i = 0; i < n; i++) {
      task_idx[i] = task_index (ep.task[i]);
      if (std::find (ep_tasks.begin (), ep_tasks.end (), ep.task[i]) == ep_tasks.end ())
        ep_tasks.push_back (ep.task[i]);
    }
    if (tasks.size () != ntasks && !write_tasks (error))
      return false;

    /* 2. The frames. */
    std::vector<int64_t> fi (n), ei (n, e), gi (n);
    std::vector<float> ts (n);
    std::vector<double> tsd (n), fid (n), eid (n, (double)e), gid (n), tid (n);
    for (size_t i = 0; i < n; i++) {
      fi[i] = (int64_t)i;
      gi[i] = frames + (int64_t)i;
      ts[i] = (float)((double)i / schema.fps);
      tsd[i] = ts[i];
      fid[i] = (double)i;
      gid[i] = (double)gi[i];
      tid[i] = (double)task_idx[i];
    }
    arrow::FloatBuilder tsb;
    PI0_TRY (tsb.AppendValues (ts));
    auto fixed = [] (size_t d) {
      return arrow::fixed_size_list (arrow::field ("element", arrow::float32 ()), (int32_t)d);
    };
    auto data_schema = arrow::schema (
        {arrow::field ("observation.state", fixed (sd)), arrow::field ("action", fixed (ad)),
         arrow::field ("timestamp", arrow::float32 ()),
         arrow::field ("frame_index", arrow::int64 ()),
         arrow::field ("episode_index", arrow::int64 ()), arrow::field ("index", arrow::int64 ()),
         arrow::field ("task_index", arrow::int64 ())},
        hf_metadata (schema));
    auto state_a = float_lists (ep.state, (int32_t)sd, n);
    auto action_a = float_lists (ep.action, (int32_t)ad, n);
    auto data = arrow::Table::Make (data_schema, {state_a, action_a, finish (tsb), int64s (fi),
                                                  int64s (ei), int64s (gi), int64s (task_idx)});
    const fs::path data_path = root / "data" / (chunk_file (next_data) + ".parquet");
    if (!write_parquet_atomic (data_path, data, error))
      return false;

    /* 3. The videos, complete: renamed into place. */
    Row row;
    row.info.index = e;
    row.info.length = (int64_t)n;
    row.info.from = frames;
    row.info.to = frames + (int64_t)n;
    row.info.data_chunk = next_data / kChunksSize;
    row.info.data_file = next_data % kChunksSize;
    row.info.tasks = ep_tasks;
    row.meta_chunk = next_meta / kChunksSize;
    row.meta_file = next_meta % kChunksSize;
    for (size_t c = 0; c < schema.cameras.size (); c++) {
      const fs::path part = video_part_path (c);
      const fs::path dst = part.parent_path () / part.stem (); /* drops ".part" */
      if (!pi0::publish_file (part.string (), dst.string (), error))
        return false;
      EpisodeInfo::Video v;
      v.chunk = next_video[c] / kChunksSize;
      v.file = next_video[c] % kChunksSize;
      v.from_ts = 0.0;
      v.to_ts = (double)n / schema.fps;
      row.info.videos.push_back (v);
    }

    /* 4. Stats of the episode, then its row, then the dataset stats, then info.json. */
    std::vector<double> sdbl (ep.state.begin (), ep.state.end ()),
        adbl (ep.action.begin (), ep.action.end ());
    row.stats.push_back (vector_stats (sdbl.data (), n, sd));
    row.stats.push_back (vector_stats (adbl.data (), n, ad));
    for (auto &cs : ep.camera_stats)
      row.stats.push_back (cs);
    row.stats.push_back (vector_stats (tsd.data (), n, 1));
    row.stats.push_back (vector_stats (fid.data (), n, 1));
    row.stats.push_back (vector_stats (eid.data (), n, 1));
    row.stats.push_back (vector_stats (gid.data (), n, 1));
    row.stats.push_back (vector_stats (tid.data (), n, 1));

    session.push_back (row);
    const fs::path meta_path = root / "meta" / "episodes" / (chunk_file (next_meta) + ".parquet");
    if (!write_parquet_atomic (meta_path, episodes_table (), error)) {
      session.pop_back ();
      return false;
    }
    rows.push_back (row);
    frames += (int64_t)n;
    next_data++;
    for (auto &v : next_video)
      v++;
    if (!write_stats (error) || !write_info (error))
      return false;
    return true;
  }

  /* Opening an existing dataset: what info.json counts is the dataset; the rest goes. */
  /* The files the committed episodes live in: every data file exists and holds exactly their
   * rows (from its footer), every video exists. Appending to a dataset that fails this would
   * bury the damage under new episodes. */
  bool check_committed_files (std::string *error)
  {
    std::map<int64_t, int64_t> rows_in; /* data file -> committed rows in it */
    for (auto &r : rows) {
      rows_in[flat_index (r.info.data_chunk, r.info.data_file)] += r.info.length;
      for (size_t c = 0; c < r.info.videos.size (); c++) {
        const fs::path v =
            root / "videos" / schema.cameras[c].key /
            (chunk_file (flat_index (r.info.videos[c].chunk, r.info.videos[c].file)) + ".mp4");
        if (!fs::is_regular_file (v, ec_))
          return fail (error, "episode " + std::to_string (r.info.index) + ": its video " +
                                  v.string () + " is missing");
      }
    }
    for (auto &kv : rows_in) {
      const fs::path d = root / "data" / (chunk_file (kv.first) + ".parquet");
      if (!fs::is_regular_file (d, ec_))
        return fail (error, "the data file " + d.string () + " is missing");
      int64_t n = -1;
      try {
        n = parquet::ParquetFileReader::OpenFile (d.string ())->metadata ()->num_rows ();
      } catch (const std::exception &e) {
        return fail (error, d.string () + " is not a readable Parquet file: " + e.what ());
      }
      if (n != kv.second)
        return fail (error, d.string () + " holds " + std::to_string (n) +
                                " frames, meta/episodes gives its episodes " +
                                std::to_string (kv.second));
    }
    return true;
  }

  bool load_existing (std::string *error)
  {
    std::string err;
    auto info = pi0::json::load_strict ((root / "meta" / "info.json").string (), &err);
    if (!info)
      return fail (error, err);
    const pi0::json::Value version = info->is_object () && info->contains ("codebase_version")
                                         ? (*info)["codebase_version"]
                                         : pi0::json::Value ();
    if (version != "v3.0")
      return fail (error, root.string () + " is not a LeRobotDataset v3.0 (codebase_version " +
                              version.dump () + ")");
    Schema have;
    if (!parse_features (*info, &have, error))
      return false;
    /* Compatible means the same fps and the same features, shape for shape. */
    if (have.fps != schema.fps)
      return fail (error, "the dataset in " + root.string () + " is at " +
                              std::to_string (have.fps) + " fps, the stream at " +
                              std::to_string (schema.fps));
    auto want_f = features_json (schema);
    auto have_f = (*info)["features"];
    for (auto it = want_f.begin (); it != want_f.end (); ++it) {
      if (!have_f.contains (it.key ()))
        return fail (error,
                     "the dataset in " + root.string () + " has no feature '" + it.key () + "'");
      if (have_f[it.key ()]["shape"] != pi0::json::Value::parse (it.value ()["shape"].dump ()) ||
          have_f[it.key ()]["dtype"] != it.value ()["dtype"].get<std::string> ())
        return fail (error, "feature '" + it.key () + "' differs: the dataset has " +
                                have_f[it.key ()].dump () + ", the stream " + it.value ().dump ());
    }
    for (auto it = have_f.begin (); it != have_f.end (); ++it)
      if (!want_f.contains (it.key ()))
        return fail (error,
                     "the dataset has feature '" + it.key () + "', which the stream does not give");
    /* Keep the dataset's own camera order and names, as info.json lists them. */
    std::vector<Row> all;
    if (!read_episode_rows (root, schema, &all, error))
      return false;
    std::sort (all.begin (), all.end (),
               [] (const Row &a, const Row &b) { return a.info.index < b.info.index; });
    int64_t committed = 0;
    std::string why;
    if (!committed_episodes (*info, all, &committed, &why))
      return fail (error, "cannot append to " + root.string () + ": " + why);
    std::vector<Row> stale;
    for (auto &r : all)
      (r.info.index < committed ? rows : stale).push_back (r);
    if (!check_committed_files (&why))
      return fail (error, "cannot append to " + root.string () + ": " + why);
    if (!read_tasks (root, &tasks, error))
      return false;
    frames = rows.empty () ? 0 : rows.back ().info.to;
    /* Next files: after the last one any committed episode uses. */
    next_data = next_meta = 0;
    next_video.assign (schema.cameras.size (), 0);
    for (auto &r : rows) {
      next_data = std::max (next_data, flat_index (r.info.data_chunk, r.info.data_file) + 1);
      next_meta = std::max (next_meta, flat_index (r.meta_chunk, r.meta_file) + 1);
      for (size_t c = 0; c < r.info.videos.size (); c++)
        next_video[c] = std::max (next_video[c],
                                  flat_index (r.info.videos[c].chunk, r.info.videos[c].file) + 1);
    }
    /* Uncommitted episodes (a crash between their files and info.json): their files and rows
     * go. Their rows can only be in the last episodes file, which is rewritten without them. */
    for (auto &r : stale) {
      fs::remove (root / "data" /
                      (chunk_file (flat_index (r.info.data_chunk, r.info.data_file)) + ".parquet"),
                  ec_);
      for (size_t c = 0; c < r.info.videos.size (); c++)
        fs::remove (
            root / "videos" / schema.cameras[c].key /
                (chunk_file (flat_index (r.info.videos[c].chunk, r.info.videos[c].file)) + ".mp4"),
            ec_);
      const int64_t mf = flat_index (r.meta_chunk, r.meta_file);
      std::vector<Row> keep;
      for (auto &k : rows)
        if (flat_index (k.meta_chunk, k.meta_file) == mf)
          keep.push_back (k);
      session = keep;
      const fs::path mp = root / "meta" / "episodes" / (chunk_file (mf) + ".parquet");
      if (keep.empty ()) {
        fs::remove (mp, ec_);
      } else {
        if (!write_parquet_atomic (mp, episodes_table (), error))
          return false;
      }
      session.clear ();
    }
    /* Files no committed row points to: data and videos past the last, and every *.part. */
    for (auto &top : {root / "data", root / "videos", root / "meta"}) {
      if (!fs::is_directory (top, ec_))
        continue;
      for (auto &f : fs::recursive_directory_iterator (top, ec_)) {
        if (!f.is_regular_file ())
          continue;
        const std::string s = f.path ().string ();
        if (s.size () > 5 && s.compare (s.size () - 5, 5, ".part") == 0)
          fs::remove (f.path (), ec_);
      }
    }
    if (!stale.empty ()) {
      if (!write_stats (error))
        return false;
    }
    return true;
  }

  std::error_code ec_;
};

} // namespace

std::unique_ptr<Writer>
Writer::open (const std::string &root_dir, const Schema &schema, bool append, std::string *error)
{
  /* As Reader::open: a damaged dataset gives a message, never an exception. */
  try {
    return open_checked (root_dir, schema, append, error);
  } catch (const std::bad_alloc &) {
    fail (error, "cannot open the dataset in " + root_dir + ": out of memory");
  } catch (const std::exception &e) {
    fail (error, "cannot open the dataset in " + root_dir + ": " + e.what ());
  }
  return nullptr;
}

std::unique_ptr<Writer>
Writer::open_checked (const std::string &root_dir, const Schema &schema, bool append,
                      std::string *error)
{
  auto w = std::make_unique<WriterImpl> ();
  w->root = root_dir;
  w->schema = schema;
  w->next_video.assign (schema.cameras.size (), 0);
  if (schema.fps <= 0 || schema.state_names.empty () || schema.action_names.empty ()) {
    fail (error, "a dataset needs a positive fps, a state and an action");
    return nullptr;
  }
  std::error_code ec;
  const bool exists = fs::exists (w->root, ec);
  const bool has_info = fs::exists (w->root / "meta" / "info.json", ec);
  if (exists && !fs::is_directory (w->root, ec)) {
    fail (error, root_dir + " exists and is not a directory");
    return nullptr;
  }
  if (has_info) {
    if (!append) {
      fail (error, root_dir + " already holds a dataset (set append=true to add episodes to it)");
      return nullptr;
    }
    if (!w->load_existing (error))
      return nullptr;
  } else if (exists) {
    /* Empty, or only what a recording that never committed an episode left (directories and
     * *.part files): ours to reuse. Anything else is someone's data. */
    for (auto &f : fs::recursive_directory_iterator (w->root, ec)) {
      const std::string s = f.path ().string ();
      const bool part = s.size () > 5 && s.compare (s.size () - 5, 5, ".part") == 0;
      if (!f.is_directory () && !part) {
        fail (error, root_dir + " is not empty and holds no dataset (no meta/info.json)");
        return nullptr;
      }
    }
  }
  fs::create_directories (w->root, ec);
  if (ec) {
    fail (error, "cannot create " + root_dir + ": " + ec.message ());
    return nullptr;
  }
  for (size_t c = 0; c < schema.cameras.size (); c++) {
    fs::create_directories (fs::path (w->video_part_path (c)).parent_path (), ec);
    if (ec) {
      fail (error, "cannot create the video directory: " + ec.message ());
      return nullptr;
    }
  }
  return w;
}

/* ---- Reader ----------------------------------------------------------------------------- */

namespace
{

class ReaderImpl : public Reader
{
public:
  fs::path root;
  Schema schema_;
  std::vector<EpisodeInfo> episodes_;
  std::string video_path_tmpl, data_path_tmpl;

  const Schema &schema () const override { return schema_; }
  const std::vector<EpisodeInfo> &episodes () const override { return episodes_; }

  std::string video_path (const EpisodeInfo &ep, size_t cam) const override
  {
    return (root / "videos" / schema_.cameras[cam].key /
            (chunk_file (flat_index (ep.videos[cam].chunk, ep.videos[cam].file)) + ".mp4"))
        .string ();
  }

  bool read_frames (const EpisodeInfo &ep, std::vector<float> *state, std::vector<float> *action,
                    std::vector<double> *timestamp, std::string *error) override
  {
    try {
      const fs::path p =
          root / "data" / (chunk_file (flat_index (ep.data_chunk, ep.data_file)) + ".parquet");
      auto t = read_parquet (p, error);
      if (!t)
        return false;
      auto ei = column (t, "episode_index", p, error), fi = column (t, "frame_index", p, error),
           ts = column (t, "timestamp", p, error), st = column (t, "observation.state", p, error),
           ac = column (t, "action", p, error);
      if (!ei || !fi || !ts || !st || !ac)
        return false;
      const size_t sd = schema_.state_names.size (), ad = schema_.action_names.size ();
      std::vector<std::pair<int64_t, int64_t>> order; /* frame_index, row */
      for (int64_t r = 0; r < t->num_rows (); r++) {
        int64_t e, f;
        if (!int64_at (ei, r, &e) || !int64_at (fi, r, &f))
          return fail (error, p.string () + ": missing episode or frame index");
        if (e == ep.index)
          order.push_back ({f, r});
      }
      std::sort (order.begin (), order.end ());
      if ((int64_t)order.size () != ep.length)
        return fail (error, p.string () + " holds " + std::to_string (order.size ()) +
                                " frames of episode " + std::to_string (ep.index) +
                                ", meta/episodes says " + std::to_string (ep.length));
      state->clear ();
      action->clear ();
      timestamp->clear ();
      std::vector<double> v;
      for (auto &o : order) {
        double t0;
        if (!flatten_numbers (st, o.second, &v) || v.size () != sd)
          return fail (error, p.string () + ": observation.state is not " + std::to_string (sd) +
                                  " numbers");
        state->insert (state->end (), v.begin (), v.end ());
        if (!flatten_numbers (ac, o.second, &v) || v.size () != ad)
          return fail (error, p.string () + ": action is not " + std::to_string (ad) + " numbers");
        action->insert (action->end (), v.begin (), v.end ());
        if (!double_at (ts, o.second, &t0))
          return fail (error, p.string () + ": timestamp missing");
        if (!std::isfinite (t0) || t0 < 0 ||
            (!timestamp->empty () && !(t0 > timestamp->back ())))
          return fail (error, p.string () + ": the timestamps of episode " +
                                  std::to_string (ep.index) + " are not finite and increasing");
        timestamp->push_back (t0);
      }
      return true;
    } catch (const std::bad_alloc &) {
      return fail (error, "cannot read the episode: out of memory");
    } catch (const std::exception &e) {
      return fail (error, std::string ("cannot read the episode: ") + e.what ());
    }
  }
};

} // namespace


std::unique_ptr<Reader>
Reader::open (const std::string &root_dir, std::string *error)
{
  /* Every check below gives a message; this is the last line, so that no file can abort the
   * process that reads it. */
  try {
    return open_checked (root_dir, error);
  } catch (const std::bad_alloc &) {
    fail (error, "cannot read the dataset in " + root_dir + ": out of memory");
  } catch (const std::exception &e) {
    fail (error, "cannot read the dataset in " + root_dir + ": " + e.what ());
  }
  return nullptr;
}

std::unique_ptr<Reader>
Reader::open_checked (const std::string &root_dir, std::string *error)
{
  auto r = std::make_unique<ReaderImpl> ();
  r->root = root_dir;
  std::string err;
  auto info = pi0::json::load_strict ((r->root / "meta" / "info.json").string (), &err);
  if (!info) {
    fail (error, err);
    return nullptr;
  }
  auto text = [&] (const char *key) {
    return info->is_object () && info->contains (key) && (*info)[key].is_string ()
               ? (*info)[key].get<std::string> ()
               : std::string ();
  };
  if (text ("codebase_version") != "v3.0") {
    fail (error, root_dir + " is not a LeRobotDataset v3.0");
    return nullptr;
  }
  if (!parse_features (*info, &r->schema_, error))
    return nullptr;
  const std::string dp = text ("data_path");
  const std::string vp = text ("video_path");
  if (dp != "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet" ||
      vp != "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4") {
    fail (error, root_dir + ": unsupported data_path or video_path template");
    return nullptr;
  }
  std::vector<Row> rows;
  if (!read_episode_rows (r->root, r->schema_, &rows, error))
    return nullptr;
  int64_t committed = 0;
  if (!committed_episodes (*info, rows, &committed, error))
    return nullptr;
  for (auto &row : rows)
    if (row.info.index < committed)
      r->episodes_.push_back (row.info);
  std::sort (r->episodes_.begin (), r->episodes_.end (),
             [] (const EpisodeInfo &a, const EpisodeInfo &b) { return a.index < b.index; });
  return r;
}

} // namespace pi0::lerobot
