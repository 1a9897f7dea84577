/**
 * Every way the primary can end, and the code it exits with; each one's
 * meaning is in EXIT_CODE_MEANINGS below.
 *
 * A clean drain is 0, never 143: a pod that shut down exactly as designed must
 * not look like a crash (immich PR #30846). We never re-raise the signal to get
 * a code: as PID 1 a re-raised SIGTERM with no handler is ignored.
 */
export const ExitCode = {
	OK: 0,
	INTERNAL: 1,
	USAGE: 2,
	DEADLINE: 3,
	SECOND_SIGNAL: 4,
	WORKER_LOST: 5,
	START_FAILED: 6,
	HOOK_FAILED: 7,
	INCOMPLETE_INSTALL: 8,
} as const;

export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];


/** One line per code, for `--help`; README.md's exit-code table must say the same (test/unit/docs.test.ts). */
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
