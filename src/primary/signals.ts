/**
 * What each signal to the primary means. Signals reach the primary from the
 * kubelet, Docker, systemd, a terminal or a person; each one whose default
 * would kill the primary (and with it every worker and every request in
 * flight) has a meaning here.
 */
export type SignalAction = 'drain' | 'reload';

export const SIGNAL_ACTIONS = {
	/** The orchestrator's stop (Kubernetes, Docker, systemd). */
	SIGTERM: 'drain',
	/** Ctrl-C. */
	SIGINT: 'drain',
	/** Replace the workers one at a time. Without a listener it would kill the primary. */
	SIGHUP: 'reload',
} as const satisfies Partial<Record<NodeJS.Signals, SignalAction>>;

export type HandledSignal = keyof typeof SIGNAL_ACTIONS;
