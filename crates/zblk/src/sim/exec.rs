//! The simulation's executor: one thread, tasks polled one at a time, the choice
//! among the ready ones drawn from the seed.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

pub(crate) type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Tasks spawned and not yet taken by the executor.
#[derive(Default)]
pub(crate) struct SpawnQueue {
    next_id: u64,
    new: Vec<(u64, Task)>,
}

/// Spawns tasks onto a [`Sim`](super::Sim)'s executor, from outside it or from
/// inside its tasks. Cheap to clone; not `Send` (the executor is one thread).
#[derive(Clone)]
pub struct Spawner {
    pub(crate) queue: Rc<RefCell<SpawnQueue>>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner").finish_non_exhaustive()
    }
}

struct Join<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

/// A spawned task's end: a future of its output.
pub struct JoinHandle<T> {
    join: Rc<RefCell<Join<T>>>,
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle").finish_non_exhaustive()
    }
}

impl<T> JoinHandle<T> {
    /// Takes the output if the task has ended.
    pub(crate) fn try_take(&self) -> Option<T> {
        self.join.borrow_mut().value.take()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut j = self.join.borrow_mut();
        match j.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                j.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Spawner {
    /// Runs `fut` as a task of the simulation; its output comes back through the
    /// handle. The task runs while [`Sim::run`](super::Sim::run) runs.
    pub fn spawn<T: 'static>(&self, fut: impl Future<Output = T> + 'static) -> JoinHandle<T> {
        let join = Rc::new(RefCell::new(Join { value: None, waker: None }));
        let j = join.clone();
        let task: Task = Box::pin(async move {
            let v = fut.await;
            let mut j = j.borrow_mut();
            j.value = Some(v);
            if let Some(w) = j.waker.take() {
                w.wake();
            }
        });
        let mut q = self.queue.borrow_mut();
        let id = q.next_id;
        q.next_id += 1;
        q.new.push((id, task));
        JoinHandle { join }
    }
}

/// Wakes a task: puts it in the ready set.
struct TaskWaker {
    id: u64,
    ready: Arc<Mutex<BTreeSet<u64>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).insert(self.id);
    }
}

/// The tasks and which of them are ready.
#[derive(Default)]
pub(crate) struct Exec {
    tasks: BTreeMap<u64, Task>,
    ready: Arc<Mutex<BTreeSet<u64>>>,
    pub queue: Rc<RefCell<SpawnQueue>>,
}

impl Exec {
    /// Takes the tasks spawned since: each is ready.
    pub fn take_spawned(&mut self) {
        let new = std::mem::take(&mut self.queue.borrow_mut().new);
        let mut ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        for (id, t) in new {
            self.tasks.insert(id, t);
            ready.insert(id);
        }
    }

    /// The ready tasks, in id order (those that ended dropped).
    pub fn ready(&self) -> Vec<u64> {
        let mut ready = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        ready.retain(|id| self.tasks.contains_key(id));
        ready.iter().copied().collect()
    }

    /// Polls task `id` once.
    pub fn poll(&mut self, id: u64) {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        let Some(mut task) = self.tasks.remove(&id) else { return };
        let waker = Waker::from(Arc::new(TaskWaker { id, ready: self.ready.clone() }));
        if task.as_mut().poll(&mut Context::from_waker(&waker)).is_pending() {
            self.tasks.insert(id, task);
        }
    }

    /// Drops every task (and those spawned and not taken yet).
    pub fn clear(&mut self) {
        let tasks = std::mem::take(&mut self.tasks);
        let new = std::mem::take(&mut self.queue.borrow_mut().new);
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).clear();
        // Dropped outside the borrows: a task's drop may drop join handles.
        drop(tasks);
        drop(new);
    }
}
