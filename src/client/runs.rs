//! `slipway run [--project P] [-e K=V] [--timeout S] [-it] [-d] -- COMMAND…`: a one-off run
//! over `POST /api/projects/{projectId}/runs`. Its output streams as it comes (the command's
//! stdout to stdout, its stderr and Slipway's own lines to stderr) and the client exits with
//! the command's exit code: 124 when it timed out, 130 when it was canceled (Ctrl-C cancels
//! it). `-it` attaches a terminal instead (`client::tty`).

use std::io::Write as _;
use std::process::ExitCode;

use crate::api::types::{CreateRun, LogStream, LogStreamEvent, Run, RunAccepted, RunState};

use super::commands::project_or_here;
use super::http::ApiClient;
use super::{path_segment, ClientError};

/// What `slipway run` was asked.
pub struct RunArgs {
    pub project: Option<String>,
    pub env: Vec<(String, String)>,
    pub timeout_s: Option<u32>,
    pub interactive: bool,
    pub detach: bool,
    pub command: Vec<String>,
}

pub async fn run(api: &ApiClient, args: RunArgs) -> Result<ExitCode, ClientError> {
    let project = project_or_here(args.project.as_deref())?;
    let body = CreateRun {
        command: args.command.join(" "),
        env: (!args.env.is_empty()).then(|| args.env.into_iter().collect()),
        timeout_s: args.timeout_s,
        interactive: args.interactive.then_some(true),
    };
    let path = format!("/api/projects/{}/runs", path_segment(&project));
    let accepted: RunAccepted = api.post_json(&path, &body).await?;
    if args.detach {
        println!("{}", accepted.run_id);
        return Ok(ExitCode::SUCCESS);
    }
    if args.interactive {
        super::tty::attach(api, &accepted.run_id).await?;
    } else {
        follow_output(api, &accepted.run_id).await?;
    }
    let run: Run = api.get(&format!("/api/runs/{}", accepted.run_id)).await?;
    Ok(ExitCode::from(exit_code_of(&run)))
}

/// Prints the run's output until it ends; Ctrl-C cancels the run (and the output goes on to
/// its end).
async fn follow_output(api: &ApiClient, run_id: &str) -> Result<(), ClientError> {
    let path = format!("/api/runs/{run_id}/logs/stream");
    let follow = super::follow::follow_stream(api, &path, |event| {
        if let LogStreamEvent::Log(line) = event {
            print_line(line.stream, &line.message)?;
        }
        Ok(())
    });
    tokio::pin!(follow);
    tokio::select! {
        result = &mut follow => return result,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("slipway: canceling {run_id}…");
        }
    }
    let cancel = format!("/api/runs/{run_id}/cancel");
    let canceled: Result<Run, ClientError> = api.post_json(&cancel, &serde_json::Map::new()).await;
    if let Err(error) = canceled {
        eprintln!("slipway: could not cancel {run_id}: {error}");
    }
    follow.await
}

fn print_line(stream: LogStream, message: &str) -> Result<(), ClientError> {
    let written = match stream {
        LogStream::Stdout => writeln!(std::io::stdout(), "{message}"),
        LogStream::System => writeln!(std::io::stderr(), "slipway: {message}"),
        _ => writeln!(std::io::stderr(), "{message}"),
    };
    written.map_err(|error| ClientError::Io(format!("writing the output: {error}")))
}

/// The exit code `slipway run` ends with for a finished run.
pub fn exit_code_of(run: &Run) -> u8 {
    match (run.state, run.exit_code) {
        (RunState::Succeeded, _) => 0,
        (_, Some(code)) => u8::try_from(code).unwrap_or(1),
        (RunState::TimedOut, None) => 124,
        (RunState::Canceled, None) => 130,
        _ => 1,
    }
}
