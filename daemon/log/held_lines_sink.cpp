#include "log/held_lines_sink.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace gdw::log {

bool HeldLinesSink::start_writer(std::chrono::microseconds hold) {
  std::lock_guard lock(mutex_);
  if (writer_running_) return true;
  hold_ = hold;
  try {
    writer_ = std::thread([this] { writer_main(); });
  } catch (const std::system_error&) {
    return false;  // no thread to be had: every line is written by its caller, as before
  }
  writer_running_ = true;  // (the thread waits for the mutex held here before it looks)
  pthread_setname_np(writer_.native_handle(), "log-writer");
  return true;
}

void HeldLinesSink::stop_writer() {
  {
    std::lock_guard lock(mutex_);
    if (!writer_running_) return;
    stopping_ = true;
    wake_.notify_one();
  }
  writer_.join();
  std::lock_guard lock(mutex_);
  // A line logged after the writer's last look is still here.
  write_all(pending_);
  pending_.clear();
  writer_running_ = stopping_ = urgent_ = false;
  written_.notify_all();
}

void HeldLinesSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t line;
  formatter_->format(msg, line);
  if (!writer_running_) {
    write_all(std::string_view(line.data(), line.size()));
    return;
  }
  if (pending_.size() > kMaxPending) {
    urgent_ = true;
    wake_.notify_one();
    written_.wait(mutex_, [&] { return pending_.size() <= kMaxPending || !writer_running_; });
    if (!writer_running_) {
      write_all(std::string_view(line.data(), line.size()));
      return;
    }
  }
  const bool batch_starts = pending_.empty() && writer_idle_;
  pending_.append(line.data(), line.size());
  const bool now = msg.level >= spdlog::level::warn;
  urgent_ = urgent_ || now;
  // Only a waiting writer is woken: once per batch, and again for a line that cannot wait.
  if (batch_starts || now) wake_.notify_one();
}

void HeldLinesSink::flush_() {
  if (!writer_running_) return;  // every line was written by its caller
  const std::uint64_t target = batches_taken_ + (pending_.empty() ? 0 : 1);
  urgent_ = true;
  wake_.notify_one();
  written_.wait(mutex_, [&] { return batches_written_ >= target || !writer_running_; });
}

void HeldLinesSink::writer_main() {
  // The writer must not preempt the thread that logs. A repair hands its line over mid-burst;
  // woken, the writer took the CPU from the event loop, which by then was past its short slice
  // and so waited behind the busy tenant's whole slice once the writer slept again (the
  // repair's other half and the next event with it: bench/wake_trace.py counted the writer
  // behind 171 of 178 preempted bursts after a runtime's exit). SCHED_BATCH wakes without
  // preempting and keeps the same CPU share. A policy an operator chose stays.
  if (::sched_getscheduler(0) == SCHED_OTHER) {
    sched_param none{};
    ::sched_setscheduler(0, SCHED_BATCH, &none);  // this thread only; on failure it stays as it was
  }
  std::unique_lock lock(mutex_);
  std::string batch;
  for (;;) {
    writer_idle_ = true;
    wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    writer_idle_ = false;
    if (!urgent_ && !stopping_) wake_.wait_for(lock, hold_, [&] { return urgent_ || stopping_; });
    if (pending_.empty()) break;  // stopping, nothing left
    batch.swap(pending_);
    urgent_ = false;
    ++batches_taken_;
    written_.notify_all();  // room again below kMaxPending
    lock.unlock();
    write_all(batch);
    batch.clear();
    lock.lock();
    ++batches_written_;
    written_.notify_all();
  }
}

void HeldLinesSink::write_all(std::string_view text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // a non-blocking stderr that is full: wait, lose nothing
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (n <= 0) return;  // nowhere to report it: the log itself failed (closed stderr)
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace gdw::log
