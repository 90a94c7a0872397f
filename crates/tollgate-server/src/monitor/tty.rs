//! The terminal while `tollgate top` draws on it: keys read one at a time and not echoed
//! (`stty -icanon -echo`, so that `q` quits without Enter), the screen of its own and the
//! cursor hidden; all given back as they were when the guard drops, whichever way it ends.

use std::io::Write;
use std::process::{Command, Stdio};

/// The terminal's settings before, to put back.
pub(super) struct RawTerminal {
    saved: Option<String>,
}

/// What `stty ARGS` answers on the terminal of stdin, if it succeeds.
fn stty(args: &[&str]) -> Option<String> {
    let out = Command::new("stty")
        .args(args)
        .stdin(Stdio::inherit())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

impl RawTerminal {
    /// Switches the terminal (when stdin is one: else keys are read as lines) and the screen.
    pub(super) fn enter() -> RawTerminal {
        let saved = stty(&["-g"]).filter(|_| stty(&["-icanon", "-echo", "min", "1"]).is_some());
        // The screen of its own, and the cursor hidden.
        print!("\x1b[?1049h\x1b[?25l");
        let _ = std::io::stdout().flush();
        RawTerminal { saved }
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        print!("\x1b[?25h\x1b[?1049l");
        let _ = std::io::stdout().flush();
        if let Some(saved) = &self.saved {
            stty(&[saved]);
        }
    }
}
