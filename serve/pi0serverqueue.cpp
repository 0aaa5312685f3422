/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The requests between the server thread and the pipeline: decoded requests queued for pop()
 * (any thread), a gone client's requests purged, and each answer or error posted back to the
 * server thread, which sends it. Server::lock_ and its rule: pi0serverimpl.h. */
#include "serve/pi0server.h"

#include "serve/pi0serverimpl.h"

namespace pi0::serve
{

void
Server::push_request (Request &&r)
{
  {
    std::lock_guard<std::mutex> lk (lock_);
    queue_.push_back (std::move (r));
    stats_.requests++;
    stats_.queued = queue_.size ();
  }
  cond_.notify_one ();
}

void
Server::purge_client (uint64_t client)
{
  std::lock_guard<std::mutex> lk (lock_);
  for (auto it = queue_.begin (); it != queue_.end ();)
    it = it->client == client ? queue_.erase (it) : it + 1;
  stats_.queued = queue_.size ();
}

Server::Pop
Server::pop (Request *out)
{
  std::unique_lock<std::mutex> lk (lock_);
  cond_.wait (lk, [this] { return flushing_ || stopping_ || !queue_.empty (); });
  if (flushing_)
    return Pop::kFlushing;
  if (stopping_ || queue_.empty ())
    return Pop::kStopped;
  *out = std::move (queue_.front ());
  queue_.pop_front ();
  stats_.queued = queue_.size ();
  return Pop::kRequest;
}

void
Server::set_flushing (bool flushing)
{
  {
    std::lock_guard<std::mutex> lk (lock_);
    flushing_ = flushing;
  }
  cond_.notify_all ();
}

namespace
{

struct Outcome {
  Server *server;
  uint64_t client, number;
  Reply reply;
  std::string error;
  bool is_error;
};

} // namespace

/* The one call into GLib under lock_ (the rule in pi0serverimpl.h): attaching the idle source
 * takes only the context's lock, and stop() cannot free the context in between. */
void
Server::post_outcome (uint64_t client, uint64_t number, Reply *reply, std::string *error)
{
  std::lock_guard<std::mutex> lk (lock_);
  if (!running_.load () || stopping_ || !context_)
    return;
  auto o = new Outcome{this,
                       client,
                       number,
                       reply ? std::move (*reply) : Reply (),
                       error ? std::move (*error) : std::string (),
                       error != nullptr};
  g_main_context_invoke_full (
      context_, G_PRIORITY_DEFAULT,
      [] (gpointer d) -> gboolean {
        auto o = static_cast<Outcome *> (d);
        try {
          if (o->server->impl_)
            o->server->impl_->deliver (o->client, o->number, &o->reply,
                                       o->is_error ? &o->error : nullptr);
        } catch (const std::exception &e) {
          g_warning ("pi0serve: could not answer client %" G_GUINT64_FORMAT ": %s", o->client,
                     e.what ());
        }
        return G_SOURCE_REMOVE;
      },
      o, [] (gpointer d) { delete static_cast<Outcome *> (d); });
}

void
Server::reply (uint64_t client, uint64_t number, Reply reply)
{
  post_outcome (client, number, &reply, nullptr);
}

void
Server::fail (uint64_t client, uint64_t number, const std::string &message)
{
  std::string m = message;
  post_outcome (client, number, nullptr, &m);
}

ServerStats
Server::stats () const
{
  std::lock_guard<std::mutex> lk (lock_);
  return stats_;
}

} // namespace pi0::serve
