/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Writer: a LeRobotDataset v3 written episode by episode, its files in the order that keeps it
 * loadable after a crash (see pi0lerobot.h), and an existing one appended to. The files' schemas
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
#include "lerobot/pi0lerobotepisodes.h"
#include "lerobot/pi0lerobotinfo.h"
#include "lerobot/pi0lerobotinternal.h"
#include "lerobot/pi0lerobotparquet.h"
#include "lerobot/pi0lerobotpublish.h"

#include <parquet/file_reader.h>

#include <algorithm>
#include <filesystem>
#include <map>

namespace fs = std::filesystem;

namespace pi0::lerobot
{

namespace
{

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
    /* info.json has one codec and one pixel format per camera, and new episodes go into new
     * files that this recording encodes: a dataset whose camera says otherwise (AV1, as LeRobot
     * records by default) would end up with features that do not describe some of its files. */
    for (const Camera &c : schema.cameras)
      for (const Camera &h : have.cameras) {
        if (h.key != c.key)
          continue;
        if (!h.codec.empty () && h.codec != c.codec)
          return fail (error, "cannot append to " + root.string () + ": its " + c.key + " is " +
                                  h.codec + " video and this recording encodes " + c.codec +
                                  " (info.json has one codec per camera): record "
                                  "into a new dataset");
        if (!h.pix_fmt.empty () && !c.pix_fmt.empty () && h.pix_fmt != c.pix_fmt)
          return fail (error, "cannot append to " + root.string () + ": its " + c.key + " is " +
                                  h.pix_fmt + " video and this recording writes " + c.pix_fmt +
                                  " (info.json has one pixel format per camera): "
                                  "record into a new dataset");
      }
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

} // namespace pi0::lerobot
