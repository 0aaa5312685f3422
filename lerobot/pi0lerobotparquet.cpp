/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Arrow tables and their cells (see pi0lerobotparquet.h): Parquet files read whole, typed cells,
 * and the columns the writer builds. */
#include "lerobot/pi0lerobotparquet.h"

#include "lerobot/pi0lerobotinternal.h"

#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>

namespace fs = std::filesystem;

namespace pi0::lerobot
{

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

std::shared_ptr<arrow::DataType>
list_of (const std::shared_ptr<arrow::DataType> &t)
{
  return arrow::list (arrow::field ("element", t));
}

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

} // namespace pi0::lerobot
