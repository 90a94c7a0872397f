//! The connections of durability mode (`wait.rs`): a small bounded pool, one connection per
//! call in flight.
//!
//! Redis reads nothing more from a connection while a `WAIT` on it is pending, so calls that
//! wait for replicas cannot share the store's one multiplexed connection: each would wait for
//! the `WAIT`s sent before it, and with a replica down every call would queue behind the full
//! wait timeout of all the others. Here each call borrows a connection of its own, and gives
//! it back when Redis answered it. A call that ends without an answer (its timeout, its caller
//! gone, an error) drops its connection instead: a `WAIT` still pending in Redis dies with it
//! (Redis frees a blocked client when its connection closes), and no later call queues behind
//! it. At most `size` connections exist per pool; a call waits for one within its timeout.

use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use tokio::sync::{Semaphore, SemaphorePermit};

/// At most `size` connections, each lent to one call at a time.
pub(crate) struct Pool {
    /// One permit per connection that may exist.
    permits: Semaphore,
    /// Connections given back, with the address they reach.
    idle: Mutex<Vec<(String, MultiplexedConnection)>>,
    /// The bound on opening a connection and on one reply (the caller's timeout is shorter
    /// where it is set).
    within: Duration,
}

/// A connection lent to one call: given back by [`Lent::keep`], dropped otherwise.
pub(crate) struct Lent<'a> {
    pool: &'a Pool,
    at: String,
    connection: Option<MultiplexedConnection>,
    _permit: SemaphorePermit<'a>,
}

impl Pool {
    pub(crate) fn new(size: usize, within: Duration) -> Pool {
        Pool {
            permits: Semaphore::new(size),
            idle: Mutex::new(Vec::with_capacity(size)),
            within,
        }
    }

    /// A connection to `at` (a name of the address), opened with `client` when none is idle;
    /// waits while `size` calls hold one. Idle connections to another address (the primary
    /// moved) are closed.
    pub(crate) async fn get(
        &self,
        at: &str,
        client: impl FnOnce() -> redis::RedisResult<redis::Client>,
    ) -> redis::RedisResult<Lent<'_>> {
        let permit = self
            .permits
            .acquire()
            .await
            .expect("the pool's semaphore is never closed");
        let idle = {
            let mut idle = self.idle.lock();
            idle.retain(|(to, _)| to == at);
            idle.pop()
        };
        let connection = match idle {
            Some((_, connection)) => connection,
            None => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.within))
                    .set_response_timeout(Some(self.within));
                client()?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?
            }
        };
        Ok(Lent {
            pool: self,
            at: at.to_owned(),
            connection: Some(connection),
            _permit: permit,
        })
    }
}

impl Lent<'_> {
    pub(crate) fn connection(&mut self) -> &mut MultiplexedConnection {
        self.connection
            .as_mut()
            .expect("a lent connection is taken only by keep")
    }

    /// Gives the connection back: Redis answered its call, nothing is pending on it.
    pub(crate) fn keep(mut self) {
        if let Some(connection) = self.connection.take() {
            let at = std::mem::take(&mut self.at);
            self.pool.idle.lock().push((at, connection));
        }
    }
}
