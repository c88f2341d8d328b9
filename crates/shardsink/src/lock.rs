//! [`lock`]: locking a mutex whatever a panicked holder left behind.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, also when a thread panicked while holding it.
///
/// Every mutex the daemon locks guards data that each holder leaves whole
/// (a value replaced, an entry inserted or removed, a list pushed to), so
/// a panic elsewhere leaves nothing half-written: going on is right, and
/// turning one panic into a cascade of them (`lock().unwrap()`) is not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_poisoned_mutex_is_still_locked_and_read() {
        let mutex = Arc::new(Mutex::new(vec![1]));
        let held = Arc::clone(&mutex);
        let panicked = std::thread::spawn(move || {
            let mut values = held.lock().unwrap_or_else(PoisonError::into_inner);
            values.push(2);
            panic!("a holder panics");
        })
        .join();
        assert!(panicked.is_err());
        assert!(mutex.is_poisoned());
        lock(&mutex).push(3);
        assert_eq!(*lock(&mutex), [1, 2, 3]);
    }
}
