//! What a running handler reports beside its outcome: progress and log lines (docs/visibility.md).
//!
//! The handler's calls ([`JobContext::progress`](crate::JobContext::progress),
//! [`JobContext::log`](crate::JobContext::log)) only record: nothing is sent from the call itself.
//! The worker loop sends what they recorded, per job:
//!
//! * **progress** travels on the job's next heartbeat; a report newer than the last one sent makes
//!   the heartbeat go early, but never more than once per [`REPORT_INTERVAL`];
//! * **log lines** wait in a buffer (at most [`MAX_BUFFERED_LOG_LINES`]; past that the newest are
//!   dropped and counted on stderr) that is posted at most once per [`REPORT_INTERVAL`], in calls of
//!   at most [`MAX_LOG_LINES`] lines and [`MAX_LOG_CALL_BYTES`] bytes of messages;
//! * when the handler ends, before its outcome is reported, the lines still buffered are posted,
//!   then the progress if its last report was not sent.
//!
//! A failure of these calls is written to stderr and never changes the job's outcome.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::types::{
    HeartbeatRequest, LogLineRequest, PostJobLogsRequest, ProgressReport, MAX_LOG_CALL_BYTES, MAX_LOG_LEVEL,
    MAX_LOG_LINES, MAX_PROGRESS_MESSAGE,
};

/// A job's log lines are posted, and its progress sent ahead of the heartbeat schedule, at most
/// once per this interval.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// The most log lines a job's buffer holds; past that, the newest are dropped (and counted).
pub const MAX_BUFFERED_LOG_LINES: usize = 10_000;
/// The level of [`JobContext::log`](crate::JobContext::log).
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// One job's reports: written by its handler (through the `JobContext`), sent by the loop.
pub(crate) struct JobReports {
    job_id: String,
    state: Mutex<ReportState>,
    /// A line arrived in an empty buffer, or the handler ended.
    logs_waiting: Notify,
    /// A progress report arrived.
    progress_waiting: Notify,
}

#[derive(Default)]
struct ReportState {
    lines: VecDeque<LogLineRequest>,
    /// Lines dropped past [`MAX_BUFFERED_LOG_LINES`] and not yet written to stderr.
    over_cap: u64,
    /// The handler ended: the calls record nothing more.
    ended: bool,
    /// The server refused this job's logs for good (lease lost, no such job or route).
    logs_off: bool,
    progress: Option<ProgressReport>,
    /// Numbers the reports: `reported` is the newest, `tried` the newest a heartbeat carried,
    /// `sent` the newest a heartbeat got an answer for.
    reported: u64,
    tried: u64,
    sent: u64,
    /// The server refused a heartbeat that carried progress: no more is sent for this job.
    progress_off: bool,
}

impl JobReports {
    pub(crate) fn new(job_id: &str) -> Self {
        JobReports {
            job_id: job_id.to_string(),
            state: Mutex::default(),
            logs_waiting: Notify::new(),
            progress_waiting: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ReportState> {
        // The state stays consistent at every await-free step, so a panic elsewhere cannot
        // leave it half-written: carry on with it.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    // --- the handler's side ---------------------------------------------------------------------

    /// Records a progress report (see [`JobContext::progress`](crate::JobContext::progress)).
    pub(crate) fn progress(&self, percent: f64, message: Option<&str>) -> Result<()> {
        if !percent.is_finite() || !(0.0..=100.0).contains(&percent) {
            return Err(Error::InvalidArgument(format!("progress percent must be 0 to 100, not {percent}")));
        }
        if let Some(message) = message {
            let chars = message.chars().count();
            if chars > MAX_PROGRESS_MESSAGE {
                return Err(Error::InvalidArgument(format!(
                    "a progress message takes at most {MAX_PROGRESS_MESSAGE} characters, not {chars}"
                )));
            }
            if message.contains('\0') {
                return Err(Error::InvalidArgument("a progress message cannot contain NUL".into()));
            }
        }
        let mut state = self.lock();
        if state.ended {
            return Ok(());
        }
        state.progress = Some(ProgressReport { percent, message: message.map(str::to_string) });
        state.reported += 1;
        drop(state);
        self.progress_waiting.notify_one();
        Ok(())
    }

    /// Buffers a log line (see [`JobContext::log_at`](crate::JobContext::log_at)).
    pub(crate) fn log(&self, level: &str, message: String) -> Result<()> {
        check_level(level)?;
        let line = LogLineRequest {
            message: fit_message(message),
            level: Some(level.to_string()),
            ts: Some(rfc3339(SystemTime::now())),
        };
        let mut state = self.lock();
        if state.ended || state.logs_off {
            return Ok(());
        }
        if state.lines.len() >= MAX_BUFFERED_LOG_LINES {
            state.over_cap += 1;
            return Ok(());
        }
        let was_empty = state.lines.is_empty();
        state.lines.push_back(line);
        drop(state);
        if was_empty {
            self.logs_waiting.notify_one();
        }
        Ok(())
    }

    // --- the loop's side ------------------------------------------------------------------------

    /// The handler ended: nothing more is recorded, and the log pump makes its last flush.
    pub(crate) fn end(&self) {
        self.lock().ended = true;
        self.logs_waiting.notify_one();
    }

    /// The job is no longer this worker's: nothing more is recorded or sent.
    pub(crate) fn abandon(&self) {
        let mut state = self.lock();
        state.ended = true;
        state.logs_off = true;
        state.lines.clear();
    }

    /// A report newer than any a heartbeat carried is waiting.
    pub(crate) fn progress_untried(&self) -> bool {
        let state = self.lock();
        !state.progress_off && state.reported > state.tried
    }

    /// Resolves when a progress report arrives (at once if one arrived since the last call).
    pub(crate) async fn progress_reported(&self) {
        self.progress_waiting.notified().await
    }

    /// The latest report and its number, when it has not been sent yet: for the next heartbeat.
    pub(crate) fn take_progress(&self) -> Option<(u64, ProgressReport)> {
        let mut state = self.lock();
        if state.progress_off || state.reported <= state.sent {
            return None;
        }
        state.tried = state.reported;
        state.progress.clone().map(|report| (state.reported, report))
    }

    /// The server answered a heartbeat that carried report number `number`.
    pub(crate) fn progress_sent(&self, number: u64) {
        let mut state = self.lock();
        state.sent = state.sent.max(number);
    }

    /// The server refused a heartbeat that carried progress (a 4xx other than 404 and 409): send
    /// no more progress for this job, so that its heartbeats go on.
    pub(crate) fn refuse_progress(&self) {
        self.lock().progress_off = true;
    }

    /// The log pump: posts the buffered lines at most once per [`REPORT_INTERVAL`] (counted from
    /// the handler's start, so a short handler's lines go in one flush at its end) until the
    /// handler ends, then what is still buffered, and returns.
    pub(crate) async fn pump_logs(&self, client: &Client, lease_token: &str) {
        let mut due = Instant::now() + REPORT_INTERVAL;
        loop {
            let last = self.wait_for_lines(due).await;
            let started = Instant::now();
            self.post_lines(client, lease_token, last).await;
            if last {
                return;
            }
            due = started + REPORT_INTERVAL;
        }
    }

    /// Waits until lines are buffered and `due` has come (false), or the handler ended (true).
    async fn wait_for_lines(&self, due: Instant) -> bool {
        loop {
            let (ended, waiting) = {
                let state = self.lock();
                (state.ended, !state.lines.is_empty())
            };
            if ended {
                return true;
            }
            if !waiting {
                self.logs_waiting.notified().await;
            } else if Instant::now() >= due {
                return false;
            } else {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    () = self.logs_waiting.notified() => {}
                }
            }
        }
    }

    /// One flush: the lines buffered now, in calls the server takes. A call that got no answer
    /// puts its lines back for the next flush (the last flush drops them instead, so that the
    /// outcome is not held up); a lost lease, an unknown job or a server without the route stop
    /// this job's logs; any other refusal drops that call's lines.
    async fn post_lines(&self, client: &Client, lease_token: &str, last: bool) {
        let job_id = self.job_id.as_str();
        let mut budget = self.lock().lines.len();
        while budget > 0 {
            let lines = self.take_call(budget);
            if lines.is_empty() {
                break;
            }
            budget = budget.saturating_sub(lines.len());
            let count = lines.len();
            let request = PostJobLogsRequest { lease_token: lease_token.to_string(), lines };
            match client.post_job_logs(job_id, &request).await {
                Ok(answer) if answer.dropped > 0 => eprintln!(
                    "queueflow worker: job {job_id} is past its log cap: the server dropped {} lines",
                    answer.dropped
                ),
                Ok(_) => {}
                Err(err) if matches!(err.status(), Some(401 | 403 | 404 | 405 | 409)) => {
                    let dropped = count + self.stop_logs();
                    eprintln!(
                        "queueflow worker: posting the logs of job {job_id} failed ({err}); {dropped} lines dropped, no more are sent for it"
                    );
                    break;
                }
                Err(err) if err.is_transient() && !last => {
                    eprintln!(
                        "queueflow worker: posting the logs of job {job_id} got no answer ({err}); sending them again later"
                    );
                    self.put_back(request.lines);
                    break;
                }
                Err(err) if err.is_transient() => {
                    let dropped = count + self.drain();
                    eprintln!(
                        "queueflow worker: posting the last logs of job {job_id} got no answer ({err}); {dropped} lines dropped"
                    );
                    break;
                }
                Err(err) => {
                    eprintln!(
                        "queueflow worker: posting the logs of job {job_id} failed ({err}); {count} lines dropped"
                    )
                }
            }
        }
        let over_cap = std::mem::take(&mut self.lock().over_cap);
        if over_cap > 0 {
            eprintln!(
                "queueflow worker: job {job_id} logged past its buffer of {MAX_BUFFERED_LOG_LINES} lines: {over_cap} lines dropped"
            );
        }
    }

    /// The next call's lines from the front of the buffer: at most `budget` and [`MAX_LOG_LINES`]
    /// lines, at most [`MAX_LOG_CALL_BYTES`] bytes of messages (each line fits alone).
    fn take_call(&self, budget: usize) -> Vec<LogLineRequest> {
        let mut state = self.lock();
        let mut lines = Vec::new();
        let mut bytes = 0;
        while lines.len() < budget.min(MAX_LOG_LINES) {
            match state.lines.front() {
                Some(line) if bytes + line.message.len() <= MAX_LOG_CALL_BYTES => {
                    bytes += line.message.len();
                    lines.extend(state.lines.pop_front());
                }
                _ => break,
            }
        }
        lines
    }

    /// Lines whose call got no answer, back at the front (the buffer's cap still holds).
    fn put_back(&self, lines: Vec<LogLineRequest>) {
        let mut state = self.lock();
        if state.ended && state.logs_off {
            return;
        }
        for line in lines.into_iter().rev() {
            state.lines.push_front(line);
        }
        while state.lines.len() > MAX_BUFFERED_LOG_LINES {
            state.lines.pop_back();
            state.over_cap += 1;
        }
    }

    /// Empties the buffer; returns how many lines it held.
    fn drain(&self) -> usize {
        let mut state = self.lock();
        let count = state.lines.len();
        state.lines.clear();
        count
    }

    /// No more logs for this job; returns how many buffered lines that drops.
    fn stop_logs(&self) -> usize {
        self.lock().logs_off = true;
        self.drain()
    }

    /// The handler's last progress, when no heartbeat carried it with an answer yet: sent in one
    /// heartbeat (once; a failure is written to stderr).
    pub(crate) async fn flush_progress(&self, client: &Client, lease_token: &str, lease_secs: u32) {
        let Some((number, report)) = self.take_progress() else { return };
        let request =
            HeartbeatRequest { lease_token: lease_token.to_string(), extend_secs: lease_secs, progress: Some(report) };
        match client.heartbeat(&self.job_id, &request).await {
            Ok(_) => self.progress_sent(number),
            Err(err) => eprintln!("queueflow worker: the last progress of job {} was not sent ({err})", self.job_id),
        }
    }
}

/// A log level: 1 to [`MAX_LOG_LEVEL`] ASCII letters.
fn check_level(level: &str) -> Result<()> {
    if level.is_empty() || level.len() > MAX_LOG_LEVEL || !level.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(Error::InvalidArgument(format!(
            "a log level is 1 to {MAX_LOG_LEVEL} ASCII letters, not {level:?}"
        )));
    }
    Ok(())
}

/// A message as one call can carry it: cut to [`MAX_LOG_CALL_BYTES`] bytes at a character
/// boundary, and any NUL (which the server cannot store) replaced with U+FFFD.
pub(crate) fn fit_message(mut message: String) -> String {
    if message.len() > MAX_LOG_CALL_BYTES {
        let mut end = MAX_LOG_CALL_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    if message.contains('\0') {
        message = message.replace('\0', "\u{FFFD}");
        // U+FFFD takes three bytes where NUL took one.
        if message.len() > MAX_LOG_CALL_BYTES {
            return fit_message(message);
        }
    }
    message
}

/// `t` as RFC 3339 in UTC with milliseconds (`2026-12-03T20:41:49.112Z`).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc_with_milliseconds() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_330_509_112);
        assert_eq!(rfc3339(t), "2026-12-03T20:41:49.112Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(4_107_542_399)), "2100-02-28T23:59:59.000Z");
    }

    #[test]
    fn messages_are_cut_at_a_character_boundary_and_lose_their_nuls() {
        assert_eq!(fit_message("short".into()), "short");
        let long = "é".repeat(40_000); // 80,000 bytes, two a character
        let cut = fit_message(long);
        assert_eq!(cut.len(), MAX_LOG_CALL_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
        let odd = format!("a{}", "€".repeat(30_000)); // 1 + 90,000 bytes
        let cut = fit_message(odd);
        assert!(cut.len() <= MAX_LOG_CALL_BYTES && cut.len() > MAX_LOG_CALL_BYTES - 3, "{}", cut.len());
        assert_eq!(fit_message("a\0b".into()), "a\u{FFFD}b");
        let nuls = fit_message("\0".repeat(MAX_LOG_CALL_BYTES));
        assert!(nuls.len() <= MAX_LOG_CALL_BYTES && nuls.chars().all(|c| c == '\u{FFFD}'));
    }

    #[test]
    fn levels_are_letters() {
        for ok in ["info", "warning", "ERROR", "abcdefghijklmnop"] {
            assert!(check_level(ok).is_ok(), "{ok}");
        }
        for bad in ["", "warn-1", "in fo", "abcdefghijklmnopq", "é"] {
            assert!(matches!(check_level(bad), Err(Error::InvalidArgument(_))), "{bad}");
        }
    }

    #[test]
    fn a_call_takes_at_most_100_lines_and_64_kib() {
        let reports = JobReports::new("j");
        for n in 0..250 {
            reports.log("info", format!("line {n}")).unwrap();
        }
        assert_eq!(reports.take_call(usize::MAX).len(), 100);
        assert_eq!(reports.take_call(30).len(), 30);
        assert_eq!(reports.take_call(usize::MAX).len(), 100);
        assert_eq!(reports.take_call(usize::MAX).len(), 20);
        assert!(reports.take_call(usize::MAX).is_empty());

        let big = "x".repeat(30 * 1024);
        for _ in 0..3 {
            reports.log("info", big.clone()).unwrap();
        }
        assert_eq!(reports.take_call(usize::MAX).len(), 2, "two 30 KiB lines fit a call, three do not");
        assert_eq!(reports.take_call(usize::MAX).len(), 1);
    }

    #[test]
    fn the_buffer_drops_its_newest_lines_past_its_cap() {
        let reports = JobReports::new("j");
        for n in 0..MAX_BUFFERED_LOG_LINES + 5 {
            reports.log("info", format!("line {n}")).unwrap();
        }
        let state = reports.lock();
        assert_eq!(state.lines.len(), MAX_BUFFERED_LOG_LINES);
        assert_eq!(state.over_cap, 5);
        assert_eq!(state.lines.back().unwrap().message, format!("line {}", MAX_BUFFERED_LOG_LINES - 1));
    }

    #[test]
    fn progress_is_checked_and_only_the_latest_unsent_report_travels() {
        let reports = JobReports::new("j");
        for bad in [-0.1, 100.5, f64::NAN, f64::INFINITY] {
            assert!(matches!(reports.progress(bad, None), Err(Error::InvalidArgument(_))), "{bad}");
        }
        let long = "m".repeat(MAX_PROGRESS_MESSAGE + 1);
        assert!(matches!(reports.progress(1.0, Some(&long)), Err(Error::InvalidArgument(_))));
        assert!(reports.take_progress().is_none());
        reports.progress(10.0, Some("a")).unwrap();
        reports.progress(20.0, None).unwrap();
        assert!(reports.progress_untried());
        let (number, report) = reports.take_progress().unwrap();
        assert_eq!(report, ProgressReport { percent: 20.0, message: None });
        assert!(!reports.progress_untried(), "carried by a heartbeat");
        assert!(reports.take_progress().is_some(), "not answered yet: the next heartbeat carries it again");
        reports.progress_sent(number);
        assert!(reports.take_progress().is_none());
        reports.end();
        reports.progress(30.0, None).unwrap();
        assert!(reports.take_progress().is_none(), "nothing is recorded once the handler ended");
    }
}
