//! RESP on the wire: requests decoded as Redis reads them (multibulk arrays of bulk strings, or
//! inline commands, split across reads anywhere), replies encoded in RESP2 or RESP3.
//!
//! The decoder never holds more than one request's bytes past [`Limits`]: a request longer than
//! a bulk or an inline line may be, or with more arguments than allowed, is a protocol error, and
//! the connection answers it and closes, as Redis does.

use std::ops::Range;

/// What one request may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most arguments (the command's name included).
    pub max_args: usize,
    /// The longest bulk string, in bytes.
    pub max_bulk: usize,
    /// The longest inline command line, in bytes.
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_args: 1024,
            max_bulk: 64 * 1024,
            max_inline: 64 * 1024,
        }
    }
}

/// A request that is not RESP: answered with `-ERR Protocol error: ...`, then the connection
/// closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// One request: its arguments, as ranges of the buffer it was decoded from (or owned, for an
/// inline command with quotes and escapes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// Ranges of the buffer.
    Ranges(Vec<Range<usize>>),
    /// Arguments of an inline command, unquoted.
    Owned(Vec<Vec<u8>>),
}

impl Args {
    /// The arguments, read from `buf` (the buffer they were decoded from).
    pub fn resolve<'a>(&'a self, buf: &'a [u8]) -> Vec<&'a [u8]> {
        match self {
            Args::Ranges(ranges) => ranges.iter().map(|r| &buf[r.clone()]).collect(),
            Args::Owned(args) => args.iter().map(Vec::as_slice).collect(),
        }
    }
}

/// Decodes the request at the start of `buf`: `Ok(None)` until it is whole, else the request
/// and the bytes it took. An empty request (a blank inline line, `*0`, `*-1`) decodes to no
/// arguments.
pub fn decode(buf: &[u8], limits: &Limits) -> Result<Option<(Args, usize)>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => multibulk(buf, limits),
        Some(_) => inline(buf, limits),
    }
}

fn error(message: &str) -> ProtocolError {
    ProtocolError(message.to_owned())
}

/// The line starting at `from`, without its `\r\n`, and where the next starts; `None` until
/// it is whole. A line longer than `max` is an error (`too_long`).
fn line(
    buf: &[u8],
    from: usize,
    max: usize,
    too_long: &str,
) -> Result<Option<(Range<usize>, usize)>, ProtocolError> {
    let rest = &buf[from..];
    match rest.iter().position(|&b| b == b'\n') {
        Some(end) if end > max => Err(error(too_long)),
        Some(end) => {
            let stop = if end > 0 && rest[end - 1] == b'\r' {
                end - 1
            } else {
                end
            };
            Ok(Some((from..from + stop, from + end + 1)))
        }
        None if rest.len() > max => Err(error(too_long)),
        None => Ok(None),
    }
}

/// A signed decimal as Redis reads a length: digits only, after an optional `-`.
fn number(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    Some(if negative { -n } else { n })
}

fn multibulk(buf: &[u8], limits: &Limits) -> Result<Option<(Args, usize)>, ProtocolError> {
    // A count line is short; one longer than any count is not RESP.
    let Some((count, mut at)) = line(buf, 1, 32, "invalid multibulk length")? else {
        return Ok(None);
    };
    let count = match number(&buf[count]) {
        Some(n) if n <= 0 => return Ok(Some((Args::Ranges(Vec::new()), at))),
        Some(n) if usize::try_from(n).is_ok_and(|n| n <= limits.max_args) => n as usize,
        _ => return Err(error("invalid multibulk length")),
    };
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&other) => {
                return Err(ProtocolError(format!(
                    "expected '$', got '{}'",
                    char::from(other).escape_default()
                )));
            }
        }
        let Some((len, start)) = line(buf, at + 1, 32, "invalid bulk length")? else {
            return Ok(None);
        };
        let len = match number(&buf[len]) {
            Some(n) if usize::try_from(n).is_ok_and(|n| n <= limits.max_bulk) => n as usize,
            _ => return Err(error("invalid bulk length")),
        };
        let end = start + len;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(error("invalid bulk length"));
        }
        args.push(start..end);
        at = end + 2;
    }
    Ok(Some((Args::Ranges(args), at)))
}

fn inline(buf: &[u8], limits: &Limits) -> Result<Option<(Args, usize)>, ProtocolError> {
    let Some((text, next)) = line(buf, 0, limits.max_inline, "too big inline request")? else {
        return Ok(None);
    };
    let args = split_inline(&buf[text]).ok_or_else(|| error("unbalanced quotes in request"))?;
    if args.len() > limits.max_args {
        return Err(error("invalid multibulk length"));
    }
    Ok(Some((Args::Owned(args), next)))
}

/// Splits an inline command as Redis does (`sdssplitargs`): words separated by blanks,
/// `"double quotes"` with `\n \r \t \b \a \\ \" \xHH` escapes, `'single quotes'` with `\'`;
/// `None` when a quote is not closed, or is closed against the next word.
fn split_inline(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut arg = Vec::new();
        let (mut in_double, mut in_single) = (false, false);
        loop {
            let c = line.get(i).copied();
            if in_double {
                match c? {
                    b'\\'
                        if line.get(i + 1) == Some(&b'x')
                            && line.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
                            && line.get(i + 3).is_some_and(u8::is_ascii_hexdigit) =>
                    {
                        let hex = std::str::from_utf8(&line[i + 2..i + 4]).ok()?;
                        arg.push(u8::from_str_radix(hex, 16).ok()?);
                        i += 3;
                    }
                    b'\\' if i + 1 < line.len() => {
                        i += 1;
                        arg.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                    }
                    b'"' => {
                        // The closing quote must end the word.
                        if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    other => arg.push(other),
                }
            } else if in_single {
                match c? {
                    b'\\' if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        arg.push(b'\'');
                    }
                    b'\'' => {
                        if line.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    other => arg.push(other),
                }
            } else {
                match c {
                    None => break,
                    Some(b) if b.is_ascii_whitespace() => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(other) => arg.push(other),
                }
            }
            i += 1;
        }
        args.push(arg);
    }
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(&'static str),
    /// `-ERR ...`: the whole line after the `-`.
    Error(String),
    /// An error line that echoes bytes a client sent, as raw as Redis echoes them (they need
    /// not be UTF-8).
    RawError(Vec<u8>),
    /// `:42`.
    Integer(i64),
    /// `$5\r\nhello`.
    Bulk(Vec<u8>),
    /// `$-1` (RESP2) or `_` (RESP3).
    Null,
    /// `*N`.
    Array(Vec<Reply>),
    /// `%N` (RESP3), or a flat array of keys and values (RESP2).
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// `-ERR <message>`.
    pub fn err(message: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {message}"))
    }

    /// A bulk string of `text`.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Bulk(text.into().into_bytes())
    }

    /// Appends the reply to `out`, in RESP3 when `resp3`.
    pub fn encode(&self, out: &mut Vec<u8>, resp3: bool) {
        // Writing to a Vec cannot fail.
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Error(e) => error_line(out, e.as_bytes()),
            Reply::RawError(e) => error_line(out, e),
            Reply::Integer(n) => header(out, b':', *n),
            Reply::Bulk(bytes) => {
                header(out, b'$', bytes.len() as i64);
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Null if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Null => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                header(out, b'*', items.len() as i64);
                for item in items {
                    item.encode(out, resp3);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    header(out, b'%', pairs.len() as i64);
                } else {
                    header(out, b'*', 2 * pairs.len() as i64);
                }
                for (k, v) in pairs {
                    k.encode(out, resp3);
                    v.encode(out, resp3);
                }
            }
        }
    }
}

fn error_line(out: &mut Vec<u8>, line: &[u8]) {
    out.push(b'-');
    // A reply line cannot hold a line break.
    out.extend(
        line.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// `kind`, `n` and CRLF. The digits by `itoa`, on the stack: formatting through `write!` into a
/// fresh `String` was a fifth of a `CL.THROTTLE`'s instructions (six such lines a reply).
fn header(out: &mut Vec<u8>, kind: u8, n: i64) {
    out.push(kind);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(buf: &[u8]) -> Vec<Vec<u8>> {
        let (args, used) = decode(buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(used, buf.len());
        args.resolve(buf).into_iter().map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn multibulk_and_inline_requests() {
        assert_eq!(
            args(b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n"),
            [b"PING".to_vec(), b"hi".to_vec()]
        );
        assert_eq!(args(b"PING hi\r\n"), [b"PING".to_vec(), b"hi".to_vec()]);
        assert_eq!(
            args(b"  ECHO   \"a b\\n\" 'c\\'d'\n"),
            [b"ECHO".to_vec(), b"a b\n".to_vec(), b"c'd".to_vec()]
        );
        assert_eq!(
            args(b"ECHO \"\\x41\\x7a\"\r\n"),
            [b"ECHO".to_vec(), b"Az".to_vec()]
        );
        assert!(args(b"\r\n").is_empty());
        assert!(args(b"*0\r\n").is_empty());
    }

    #[test]
    fn a_request_split_anywhere_waits_for_the_rest() {
        let whole = b"*3\r\n$11\r\nCL.THROTTLE\r\n$3\r\nkey\r\n$0\r\n\r\n";
        for cut in 0..whole.len() {
            assert_eq!(
                decode(&whole[..cut], &Limits::default()),
                Ok(None),
                "cut at {cut}"
            );
        }
        assert_eq!(args(whole).len(), 3);
    }

    #[test]
    fn what_is_not_resp_is_a_protocol_error_worded_as_redis_words_it() {
        let limits = Limits {
            max_args: 4,
            max_bulk: 8,
            max_inline: 16,
        };
        let refused = |buf: &[u8]| decode(buf, &limits).unwrap_err().0;
        assert_eq!(refused(b"*2\r\n:1\r\n"), "expected '$', got ':'");
        assert_eq!(refused(b"*x\r\n"), "invalid multibulk length");
        assert_eq!(refused(b"*5\r\n"), "invalid multibulk length");
        assert_eq!(refused(b"*1\r\n$9\r\n"), "invalid bulk length");
        assert_eq!(refused(b"*1\r\n$2\r\nabc\r\n"), "invalid bulk length");
        assert_eq!(refused(b"AAAAAAAAAAAAAAAAAAAA"), "too big inline request");
        assert_eq!(refused(b"ECHO \"abc\r\n"), "unbalanced quotes in request");
        assert_eq!(refused(b"ECHO \"a\"b\r\n"), "unbalanced quotes in request");
    }

    #[test]
    fn replies_in_resp2_and_resp3() {
        let reply = Reply::Map(vec![(Reply::text("proto"), Reply::Integer(3))]);
        let (mut two, mut three) = (Vec::new(), Vec::new());
        reply.encode(&mut two, false);
        reply.encode(&mut three, true);
        assert_eq!(two, b"*2\r\n$5\r\nproto\r\n:3\r\n");
        assert_eq!(three, b"%1\r\n$5\r\nproto\r\n:3\r\n");
        let mut null = Vec::new();
        Reply::Null.encode(&mut null, false);
        Reply::Null.encode(&mut null, true);
        assert_eq!(null, b"$-1\r\n_\r\n");
    }
}
