#include "backend/program_load_thread.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace gdw {

ProgramLoadThread::~ProgramLoadThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    queued_.clear();
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  for (auto& d : done_list_)
    if (d.fd.ok()) ::close(*d.fd);
}

bool ProgramLoadThread::has_locked(const std::string& key) const {
  return loading_ == key ||
         std::any_of(queued_.begin(), queued_.end(), [&](const Job& j) { return j.key == key; }) ||
         std::any_of(done_list_.begin(), done_list_.end(), [&](const Loaded& d) { return d.key == key; });
}

bool ProgramLoadThread::has(const std::string& key) const {
  std::lock_guard lock(mutex_);
  return has_locked(key);
}

bool ProgramLoadThread::submit(std::string key, BpfCode code, std::string what) {
  {
    std::lock_guard lock(mutex_);
    const std::size_t held = queued_.size() + (loading_.empty() ? 0 : 1) + done_list_.size();
    if (stopping_ || held >= kMaxQueued || has_locked(key)) return false;
    queued_.push_back({std::move(key), std::move(code), std::move(what)});
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  wake_.notify_one();
  return true;
}

bool ProgramLoadThread::take_over(const std::string& key, std::chrono::microseconds limit) {
  std::unique_lock lock(mutex_);
  std::erase_if(queued_, [&](const Job& j) { return j.key == key; });
  done_.wait_for(lock, limit, [&] { return loading_ != key; });
  return std::any_of(done_list_.begin(), done_list_.end(), [&](const Loaded& d) { return d.key == key; });
}

std::vector<ProgramLoadThread::Loaded> ProgramLoadThread::take_done() {
  std::lock_guard lock(mutex_);
  std::vector<Loaded> out;
  out.swap(done_list_);
  return out;
}

void ProgramLoadThread::run() {
  // Not to preempt what runs when it wakes (the loop that queued the load among them), and
  // no more than a fair share: SCHED_BATCH. Created by a loop under SCHED_FIFO (reset on
  // fork), it starts as SCHED_OTHER too. A policy an operator chose stays.
  if (::sched_getscheduler(0) == SCHED_OTHER) {
    sched_param none{};
    ::sched_setscheduler(0, SCHED_BATCH, &none);  // this thread only; on failure it stays as it was
  }
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    Job job = std::move(queued_.front());
    queued_.pop_front();
    loading_ = job.key;
    lock.unlock();
    Result<int> fd = load_(job.code, job.what);
    lock.lock();
    loading_.clear();
    done_list_.push_back({std::move(job.key), std::move(fd)});
    done_.notify_all();
  }
}

}  // namespace gdw
