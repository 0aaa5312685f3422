/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* How a file of the dataset is put in place: whole or not at all, through common/pi0atomicfile.h,
 * its temporary file named <file>.part so that what a crash leaves is found by that suffix (and
 * removed by Writer::open). Parent directories are made as needed. */

#include <arrow/table.h>

#include <filesystem>
#include <memory>
#include <string>

namespace pi0::lerobot
{

bool write_text_atomic (const std::filesystem::path &dst, const std::string &text,
                        std::string *error);
/* Snappy-compressed, with the Arrow schema and its metadata stored, as pyarrow writes them. */
bool write_parquet_atomic (const std::filesystem::path &dst,
                           const std::shared_ptr<arrow::Table> &table, std::string *error);

} // namespace pi0::lerobot
