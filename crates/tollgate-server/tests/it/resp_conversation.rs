//! The Redis protocol front end's conversation without a socket (`resp::Conversation`, what
//! `scripts/instructions` counts as `resp_throttle`): bytes in, the same replies a client of the
//! listener reads out (`resp.rs` drives the listener).

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;

use tollgate_server::App;
use tollgate_server::config::Config;
use tollgate_server::resp::{Answered, Conversation, MAX_PENDING, Shared};
use tollgate_server::settings::{Overrides, Settings};

/// The memory store's server, with `[resp] password = "s3cret"`.
async fn app() -> App {
    let config = Config::parse(Path::new("t.toml"), "[resp]\npassword = \"s3cret\"\n").unwrap();
    App::open(Settings::resolve(Overrides::default(), Some(&config)))
        .await
        .unwrap()
}

/// Answers every whole request in `input`, as a connection does: the replies, and what the
/// last answer was.
async fn answer_all(conversation: &mut Conversation<'_>, input: &[u8]) -> (String, Answered) {
    let mut output = Vec::new();
    let mut consumed = 0;
    loop {
        let answered = conversation.answer(&input[consumed..], &mut output).await;
        match answered {
            Answered::Request { used, close: false } => consumed += used,
            _ => return (String::from_utf8(output).unwrap(), answered),
        }
    }
}

#[tokio::test]
async fn a_conversation_authenticates_throttles_and_waits_for_the_rest_of_a_request() {
    let app = app().await;
    let shared = Shared::new(
        Arc::clone(app.limiter()),
        app.settings().resp.password.clone(),
        0,
    );
    let mut conversation = Conversation::new(&shared, IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_eq!(
        answer_all(&mut conversation, b"CL.THROTTLE user 15 30 60\r\n").await,
        (
            "-NOAUTH Authentication required.\r\n".to_owned(),
            Answered::Incomplete
        )
    );
    // A whole request, a blank line (no reply), and half of the next.
    let (replies, last) = answer_all(
        &mut conversation,
        b"AUTH s3cret\r\n*5\r\n$11\r\nCL.THROTTLE\r\n$4\r\nuser\r\n$2\r\n15\r\n$2\r\n30\r\n$2\r\n60\r\n\r\n*1\r\n$4\r\nPI",
    )
    .await;
    assert_eq!(replies, "+OK\r\n*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n");
    assert_eq!(last, Answered::Incomplete);
    let mut output = Vec::new();
    assert_eq!(
        conversation.answer(b"QUIT\r\nPING\r\n", &mut output).await,
        Answered::Request {
            used: 6,
            close: true
        }
    );
    assert_eq!(output, b"+OK\r\n");
}

#[tokio::test]
async fn garbage_and_a_request_too_long_to_hold_break_the_conversation() {
    let app = app().await;
    let shared = Shared::new(Arc::clone(app.limiter()), None, 0);
    let mut conversation = Conversation::new(&shared, IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_eq!(
        answer_all(&mut conversation, b"PING\r\n*2\r\n:1\r\nPING\r\n").await,
        (
            "+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n".to_owned(),
            Answered::Broken
        )
    );
    // Three arguments, the last unfinished, held up to what a connection keeps and one byte more.
    let mut long = b"*3\r\n$4\r\nECHO\r\n$60000\r\n".to_vec();
    long.resize(long.len() + 60_000, b'x');
    long.extend_from_slice(b"\r\n$60000\r\n");
    long.resize(MAX_PENDING, b'x');
    assert_eq!(
        answer_all(&mut conversation, &long).await,
        (String::new(), Answered::Incomplete)
    );
    long.push(b'x');
    assert_eq!(
        answer_all(&mut conversation, &long).await,
        (
            "-ERR Protocol error: too big request\r\n".to_owned(),
            Answered::Broken
        )
    );
}
