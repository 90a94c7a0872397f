//! Which Redis Cluster node serves each hash slot, to batch a cluster's checks per node.
//!
//! Read from `CLUSTER SLOTS` at start and again whenever a call finds a bucket its node does not
//! serve (a slot moved). The map only groups checks: a stale one costs a retry, never a wrong
//! decision, since a script that meets a bucket its node does not serve takes back whatever it
//! wrote and fails before it decides anything.

use std::sync::Arc;

use parking_lot::RwLock;
use redis::Value;
use redis::cluster_async::ClusterConnection;

use crate::StoreError;

use super::error::store_error;

/// Redis Cluster's number of hash slots.
const SLOTS: usize = 16_384;

/// The hash slot of a Redis key: CRC16 (XMODEM) of its hash tag, the bytes between the first
/// `{` and the next `}` when there are any, else of the whole key.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    let crc = crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key));
    // 16,384 divides 65,536: the slot is the low 14 bits.
    crc & (SLOTS as u16 - 1)
}

/// The node (`host:port`) serving each slot, as last read.
pub(crate) struct Nodes {
    owners: RwLock<Owners>,
}

struct Owners {
    /// Per slot, the index of its node in `names`; `u16::MAX` for a slot no node serves.
    of_slot: Box<[u16]>,
    names: Vec<Arc<[u8]>>,
}

impl Nodes {
    /// Reads the map through `conn`.
    pub(crate) async fn read(conn: &mut ClusterConnection) -> Result<Nodes, StoreError> {
        Ok(Nodes {
            owners: RwLock::new(owners(conn).await?),
        })
    }

    /// Reads the map again (after a call met a slot that moved). On failure the old map stays:
    /// the calls it groups wrongly are asked again per slot.
    pub(crate) async fn refresh(&self, conn: &mut ClusterConnection) {
        if let Ok(owners) = owners(conn).await {
            *self.owners.write() = owners;
        }
    }

    /// The name of the node serving `slot` (empty when none does).
    pub(crate) fn node_of(&self, slot: u16) -> Arc<[u8]> {
        let owners = self.owners.read();
        owners
            .names
            .get(usize::from(owners.of_slot[usize::from(slot)]))
            .map_or_else(|| Arc::from(&[][..]), Arc::clone)
    }
}

/// `CLUSTER SLOTS`: ranges `[first, last, [host, port, id, ...], replicas...]`.
async fn owners(conn: &mut ClusterConnection) -> Result<Owners, StoreError> {
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(conn)
        .await
        .map_err(store_error)?;
    let malformed = || StoreError::incompatible("malformed reply to CLUSTER SLOTS");
    let Value::Array(ranges) = reply else {
        return Err(malformed());
    };
    let mut of_slot = vec![u16::MAX; SLOTS].into_boxed_slice();
    let mut names: Vec<Arc<[u8]>> = Vec::new();
    for range in ranges {
        let Value::Array(range) = range else {
            return Err(malformed());
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (range.first(), range.get(1), range.get(2))
        else {
            return Err(malformed());
        };
        let name = match (master.first(), master.get(1)) {
            (Some(Value::BulkString(host)), Some(Value::Int(port))) => {
                let mut name = host.clone();
                name.push(b':');
                name.extend_from_slice(port.to_string().as_bytes());
                Arc::from(name)
            }
            _ => return Err(malformed()),
        };
        let index = match names.iter().position(|n| *n == name) {
            Some(i) => i,
            None => {
                names.push(name);
                names.len() - 1
            }
        };
        let index = u16::try_from(index).map_err(|_| malformed())?;
        let (first, last) = (usize::try_from(*first), usize::try_from(*last));
        let (Ok(first), Ok(last)) = (first, last) else {
            return Err(malformed());
        };
        for owner in of_slot.get_mut(first..=last).ok_or_else(malformed)? {
            *owner = index;
        }
    }
    Ok(Owners { of_slot, names })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots Redis 7.0.15 answers to `CLUSTER KEYSLOT`.
    #[test]
    fn slots_are_those_redis_computes() {
        assert_eq!(slot(b"a"), 15_495);
        assert_eq!(slot(b"b"), 3_300);
        assert_eq!(slot(b"tollgate:v3:{b}:tb:=x"), 3_300);
        // An empty tag `{}` does not count: the whole key is hashed.
        assert_eq!(slot(b"{}b"), 6_680);
        assert_eq!(slot(b"x{}{b}"), 10_463);
    }
}
