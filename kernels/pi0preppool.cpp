/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pools pi0prep's callers keep across frames: BlockPool (output blocks, host or device
 * memory, recycled as buffers come back) and ThreadPool (persistent workers for prep_cpu).
 * Each pool has one lock and neither takes the other's: no lock order to keep. */

#include "kernels/pi0prep.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pi0::prep
{

std::shared_ptr<BlockPool>
BlockPool::make (Alloc alloc, Free free)
{
  return std::shared_ptr<BlockPool> (new BlockPool (alloc, free));
}

std::shared_ptr<BlockPool>
BlockPool::host ()
{
  return make ([] (size_t n) { return std::aligned_alloc (64, (n + 63) / 64 * 64); }, std::free);
}

BlockPool::~BlockPool ()
{
  for (void *b : free_blocks_)
    free_ (b);
}

BlockPool::Block *
BlockPool::acquire (size_t size)
{
  void *data = nullptr;
  {
    std::lock_guard<std::mutex> lk (lock_);
    if (size_ != size) {
      for (void *b : free_blocks_)
        free_ (b);
      free_blocks_.clear ();
      size_ = size;
    }
    if (!free_blocks_.empty ()) {
      data = free_blocks_.back ();
      free_blocks_.pop_back ();
    }
  }
  if (!data)
    data = alloc_ (size);
  if (!data)
    return nullptr;
  Block *b = new Block;
  b->pool = shared_from_this ();
  b->data = data;
  b->size = size;
  return b;
}

void
BlockPool::release (void *p)
{
  Block *b = static_cast<Block *> (p);
  BlockPool &pool = *b->pool;
  {
    std::lock_guard<std::mutex> lk (pool.lock_);
    if (!pool.closed_ && b->size == pool.size_) {
      pool.free_blocks_.push_back (b->data);
      b->data = nullptr;
    }
  }
  if (b->data)
    pool.free_ (b->data);
  if (b->event && b->destroy_event)
    b->destroy_event (b->event);
  delete b;
}

void
BlockPool::close ()
{
  std::lock_guard<std::mutex> lk (lock_);
  closed_ = true;
}

/* ------------------------------------------------------------------------------------------ */
/* Thread pool */

struct ThreadPool::Impl {
  std::vector<std::thread> threads;
  std::mutex lock;
  std::condition_variable wake, done;
  const std::function<void (int)> *fn = nullptr;
  int n_tasks = 0;
  std::atomic<int> next{0};
  int finished = 0; /* workers done with the current generation */
  uint64_t generation = 0;
  bool quit = false;

  /* fn and n_tasks are written under the lock before the generation is published and stay
   * put until every worker has reported back, so workers read them without the lock. */
  void work ()
  {
    for (int i; (i = next.fetch_add (1)) < n_tasks;)
      (*fn) (i);
  }
};

ThreadPool::ThreadPool (int n_threads) : impl_ (new Impl)
{
  Impl *d = impl_;
  for (int t = 1; t < std::max (1, n_threads); t++) {
    d->threads.emplace_back ([d] {
      uint64_t seen = 0;
      std::unique_lock<std::mutex> lk (d->lock);
      for (;;) {
        d->wake.wait (lk, [&] { return d->quit || d->generation != seen; });
        if (d->quit)
          return;
        seen = d->generation;
        lk.unlock ();
        d->work ();
        lk.lock ();
        /* Every worker checks in for every generation, so run() never returns while one is
         * still inside (or about to enter) work(). */
        if (++d->finished == static_cast<int> (d->threads.size ()))
          d->done.notify_all ();
      }
    });
  }
}

ThreadPool::~ThreadPool ()
{
  {
    std::lock_guard<std::mutex> lk (impl_->lock);
    impl_->quit = true;
  }
  impl_->wake.notify_all ();
  for (auto &t : impl_->threads)
    t.join ();
  delete impl_;
}

int
ThreadPool::size () const
{
  return static_cast<int> (impl_->threads.size ()) + 1;
}

void
ThreadPool::run (int n_tasks, const std::function<void (int)> &fn)
{
  Impl *d = impl_;
  {
    std::lock_guard<std::mutex> lk (d->lock);
    d->fn = &fn;
    d->n_tasks = n_tasks;
    d->next = 0;
    d->finished = 0;
    d->generation++;
  }
  d->wake.notify_all ();
  d->work ();
  std::unique_lock<std::mutex> lk (d->lock);
  d->done.wait (lk, [&] { return d->finished == static_cast<int> (d->threads.size ()); });
  d->fn = nullptr;
}

} // namespace pi0::prep
