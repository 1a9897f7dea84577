/**
 * What each signal to the primary means. Signals reach the primary from the
 * kubelet, Docker, systemd, a terminal or a person; every catchable one whose
 * default would kill the primary (and with it every worker and every request
 * in flight) has a meaning here, or is logged and ignored. People bring their
 * habits: nginx and gunicorn users stop with SIGQUIT, pm2 and nodemon users
 * reload with SIGUSR2.
 *
 * Left alone: SIGUSR1 (Node opens its inspector on it), SIGPROF (V8's sampling
 * profiler ticks on it: a handler of ours would replace the profiler's, and
 * `--cpu-prof`, clinic or an APM's continuous profiler started in a `--require`
 * preload would record nothing from then on), SIGPIPE and SIGXFSZ (Node
 * ignores them), and the signals that stop rather than kill (SIGTSTP,
 * SIGTTIN, SIGTTOU) or are ignored by default (SIGCHLD, SIGWINCH, SIGURG, SIGCONT).
 */
export type SignalAction = 'drain' | 'reload' | 'ignore';

export const SIGNAL_ACTIONS = {
	/** The orchestrator's stop (Kubernetes, Docker, systemd). */
	SIGTERM: 'drain',
	/** Ctrl-C. */
	SIGINT: 'drain',
	/** Ctrl-\ ; nginx's and gunicorn's graceful stop. */
	SIGQUIT: 'drain',
	/** Replace the workers one at a time. */
	SIGHUP: 'reload',
	/** pm2's and nodemon's habit for a restart. */
	SIGUSR2: 'reload',
	SIGALRM: 'ignore',
	SIGVTALRM: 'ignore',
	SIGIO: 'ignore',
	SIGPWR: 'ignore',
	SIGSTKFLT: 'ignore',
	SIGTRAP: 'ignore',
	SIGSYS: 'ignore',
	SIGXCPU: 'ignore',
} as const satisfies Partial<Record<NodeJS.Signals, SignalAction>>;

export type HandledSignal = keyof typeof SIGNAL_ACTIONS;

export const HANDLED_SIGNALS = Object.keys(SIGNAL_ACTIONS) as HandledSignal[];

/**
 * A process's own exit code that means it ended as asked, after a signal: 0,
 * or 128 + the number of a drain or reload signal (143 for SIGTERM, 130 for
 * SIGINT), which many shutdown handlers exit with by convention. Any other
 * code from the app's shutdown is a failure.
 */
export function isCleanShutdownCode(code: number | null): boolean {
	if (code === 0) {
		return true;
	}

	// node:os when asked, not at load: this module is in every worker's bootstrap.
	const {signals} = process.getBuiltinModule('node:os').constants;
	return code !== null && HANDLED_SIGNALS.some(signal => SIGNAL_ACTIONS[signal] !== 'ignore' && code === 128 + signals[signal]);
}
