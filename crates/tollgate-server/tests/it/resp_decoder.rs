//! The RESP decoder on any input: random and mutated frames, fed whole or split anywhere,
//! never panic, and a split never changes what is decoded.

use proptest::prelude::*;
use tollgate_server::resp::codec::{Limits, decode};

/// Decodes `bytes` as a connection would: requests one after another until one is incomplete
/// or refused. Returns the arguments of each and whether it ended on an error.
fn decode_all(bytes: &[u8], limits: &Limits) -> (Vec<Vec<Vec<u8>>>, bool) {
    let mut at = 0;
    let mut requests = Vec::new();
    loop {
        match decode(&bytes[at..], limits) {
            Ok(Some((args, used))) => {
                assert!(used > 0 && at + used <= bytes.len());
                let frame = &bytes[at..at + used];
                requests.push(
                    args.resolve(frame)
                        .into_iter()
                        .map(<[u8]>::to_vec)
                        .collect(),
                );
                at += used;
            }
            Ok(None) => return (requests, false),
            Err(_) => return (requests, true),
        }
    }
}

/// Feeds `bytes` in pieces cut at `cuts`, decoding after each as the server does.
fn decode_split(bytes: &[u8], cuts: &[usize], limits: &Limits) -> (Vec<Vec<Vec<u8>>>, bool) {
    let mut buffer = Vec::new();
    let mut requests = Vec::new();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(bytes.len());
    points.sort_unstable();
    let mut fed = 0;
    for point in points {
        buffer.extend_from_slice(&bytes[fed..point]);
        fed = point;
        let (decoded, failed) = decode_all(&buffer, limits);
        let used: usize = {
            // Re-decode to find how many bytes the whole requests took.
            let mut at = 0;
            for _ in 0..decoded.len() {
                at += decode(&buffer[at..], limits).unwrap().unwrap().1;
            }
            at
        };
        requests.extend(decoded);
        if failed {
            return (requests, true);
        }
        buffer.drain(..used);
    }
    (requests, false)
}

fn frame() -> impl Strategy<Value = Vec<u8>> {
    let arg = proptest::collection::vec(any::<u8>(), 0..12);
    proptest::collection::vec(arg, 0..5).prop_map(|args| {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(&a);
            out.extend_from_slice(b"\r\n");
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let limits = Limits { max_args: 8, max_bulk: 32, max_inline: 64 };
        decode_all(&bytes, &limits);
    }

    #[test]
    fn mutated_frames_never_panic_and_splits_change_nothing(
        frames in proptest::collection::vec(frame(), 1..6),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut bytes: Vec<u8> = frames.concat();
        for (at, byte) in flips {
            let len = bytes.len();
            bytes[at % len] = byte;
        }
        let limits = Limits::default();
        let whole = decode_all(&bytes, &limits);
        let split = decode_split(&bytes, &cuts, &limits);
        prop_assert_eq!(whole, split);
    }
}
