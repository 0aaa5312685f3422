/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Putting a file of the dataset in place (see pi0lerobotpublish.h): metadata as text, tables as
 * Parquet, both through common/'s atomic write. */
#include "lerobot/pi0lerobotpublish.h"

#include "common/pi0atomicfile.h"
#include "lerobot/pi0lerobotinternal.h"

#include <arrow/io/file.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace fs = std::filesystem;

namespace pi0::lerobot
{

namespace
{

bool
write_atomic (const fs::path &dst, const pi0::FileWriter &write, std::string *error)
{
  std::error_code ec;
  fs::create_directories (dst.parent_path (), ec);
  return pi0::write_file_atomic (dst.string (), dst.string () + ".part", write, error);
}

} // namespace

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

} // namespace pi0::lerobot
