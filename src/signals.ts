/**
 * What each signal to the primary means. Every catchable one whose default
 * would kill the primary (and every worker with it) has a meaning here, or is
 * logged and ignored. People bring their habits: nginx and gunicorn users stop
 * with SIGQUIT, pm2 and nodemon users reload with SIGUSR2.
 *
 * Left alone: SIGUSR1 (Node's inspector), SIGPROF (a handler of ours would
 * replace V8's sampling profiler's: `--cpu-prof` or an APM profiler would
 * record nothing), SIGPIPE and SIGXFSZ (Node ignores them), and the signals
 * that stop rather than kill or are ignored by default.
 */
export type SignalAction = 'drain' | 'reload' | 'ignore';

export const SIGNAL_ACTIONS = {
	SIGTERM: 'drain',
	SIGINT: 'drain',
	SIGQUIT: 'drain',
	SIGHUP: 'reload',
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
 * An exit code that means the process ended as asked: 0, or 128 + a drain or
 * reload signal's number (143 for SIGTERM), as many shutdown handlers exit.
 */
export function isCleanShutdownCode(code: number | null): boolean {
	if (code === 0) {
		return true;
	}

	// node:os when asked, not at load: this module is in every worker's bootstrap.
	const {signals} = process.getBuiltinModule('node:os').constants;
	return code !== null && HANDLED_SIGNALS.some(signal => SIGNAL_ACTIONS[signal] !== 'ignore' && code === 128 + signals[signal]);
}
