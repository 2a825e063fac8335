//! A value a background task publishes and handlers read: the current
//! copy, swapped whole, and a wait for the first publication, so that a
//! request that arrives just after a start or a reload is answered from the
//! first real copy rather than from the placeholder (for at most the bound
//! the reader gives).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;

/// How long a request waits for the first publication of a new
/// configuration's documents (its upstreams' answers, a second or so after
/// a start or a reload) before it is answered from the placeholder.
pub(crate) const FIRST_PUBLICATION_WAIT: Duration = Duration::from_secs(5);

pub(crate) struct Published<T> {
    current: ArcSwap<T>,
    published: AtomicBool,
    notify: Notify,
}

impl<T> Published<T> {
    /// `placeholder` until the first [`Published::publish`].
    pub(crate) fn new(placeholder: T) -> Self {
        Published {
            current: ArcSwap::from_pointee(placeholder),
            published: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }

    pub(crate) fn load(&self) -> Arc<T> {
        self.current.load_full()
    }

    pub(crate) fn publish(&self, value: T) {
        self.current.store(Arc::new(value));
        self.settle();
    }

    /// Nothing will be published: the placeholder is the value.
    pub(crate) fn settle(&self) {
        self.published.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Returns once something was published (or settled), or after `bound`.
    pub(crate) async fn first(&self, bound: Duration) {
        // Registered before the check, so a publication in between wakes it.
        let published = self.notify.notified();
        if self.published.load(Ordering::Acquire) {
            return;
        }
        let _ = tokio::time::timeout(bound, published).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Published;

    #[tokio::test]
    async fn a_reader_waits_for_the_first_publication() {
        let published = Arc::new(Published::new(0));
        let reader = {
            let published = Arc::clone(&published);
            tokio::spawn(async move {
                published.first(Duration::from_secs(30)).await;
                *published.load()
            })
        };
        tokio::task::yield_now().await;
        published.publish(7);
        assert_eq!(reader.await.expect("the reader"), 7);
        // Later readers do not wait.
        published.first(Duration::from_secs(30)).await;
    }
}
