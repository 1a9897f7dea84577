/**
 * Every way the primary can end, and the code it exits with.
 *
 * Orchestrators read these: Kubernetes shows the code in `lastState.terminated`,
 * systemd in `ExecMainStatus`. A clean drain is 0, never 143, because a pod that
 * shut down exactly as designed must not look like a crash (immich PR #30846).
 * We never re-raise the signal to get a code: as PID 1 a re-raised SIGTERM with
 * no handler is ignored.
 */
export const ExitCode = {
	/** Every worker drained and exited on its own. */
	OK: 0,
	/** A bug in graceful-cluster itself. Please report it at https://github.com/graceful-cluster/graceful-cluster/issues. */
	INTERNAL: 1,
	/** Bad flags, environment values or a missing script. Nothing was started. */
	USAGE: 2,
	/** The grace period ran out; the workers left were killed with SIGKILL. */
	DEADLINE: 3,
	/** A second SIGTERM/SIGINT/SIGQUIT arrived during the drain; the workers were killed at once. */
	SECOND_SIGNAL: 4,
	/** A worker left the drain without draining (see EXIT_CODE_MEANINGS). */
	WORKER_LOST: 5,
	/** The app failed to start (crashed or never listened) several times in a row. */
	START_FAILED: 6,
	/**
	 * Every request was served, but the app's shutdown code failed: an
	 * `onShutdown` hook or one of its own signal listeners threw, rejected or
	 * exited the worker non-zero.
	 */
	HOOK_FAILED: 7,
	/** A file of graceful-cluster's own is missing or cut short, or a package it needs is not installed. Nothing was started. */
	INCOMPLETE_INSTALL: 8,
} as const;

export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];


/**
 * One line per code, for `--help`. README.md's exit-code table says the same
 * (test/unit/docs.test.ts keeps the two in step).
 */
export const EXIT_CODE_MEANINGS: Readonly<Record<keyof typeof ExitCode, string>> = {
	OK: 'every worker drained and exited on its own (also as PID 1: never 143)',
	INTERNAL: 'a bug in graceful-cluster; please report it at https://github.com/graceful-cluster/graceful-cluster/issues',
	USAGE: 'bad flags, environment values, or a missing script; nothing was started',
	DEADLINE: 'the grace period ran out; the workers left were killed',
	SECOND_SIGNAL: 'a second SIGTERM/SIGINT/SIGQUIT during the drain, 100 ms or more after the first (a closer one is the same Ctrl-C forwarded by npm); the workers were killed at once',
	WORKER_LOST: 'a worker left the drain without draining: one with a drained server exited (or was killed as hung) before it reported that its requests were done, whatever its last in-flight count; one with nothing to drain died before the drain disconnected it, or listened and was killed at the deadline. An exit during its shutdown (its hooks; with nothing to drain, its own listeners once disconnected: a failing code there is 7), or before it ever listened, does not count',
	START_FAILED: 'the app failed to start --max-start-failures times in a row (crashed before listening, or did not listen within --listen-timeout)',
	HOOK_FAILED: 'every request was served, but the app\'s shutdown failed: an onShutdown hook, one of its own signal or beforeExit listeners threw, rejected, or set a failing exit code (process.exitCode, process.exit(n)), named in the log',
	INCOMPLETE_INSTALL: 'graceful-cluster\'s own files or its dependencies are incomplete (a file missing or cut short, a package not installed); nothing was started: reinstall it',
};
