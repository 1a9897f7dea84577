/**
 * The primary's signals are its own. A preload in NODE_OPTIONS runs in the
 * primary too, and OpenTelemetry's getting-started tracing.js ends with
 * `process.on('SIGTERM', () => sdk.shutdown().finally(() => process.exit(0)))`:
 * in the primary, that would end the cluster at the signal and cut every
 * request in flight. So there a listener on a signal it handles is taken off as
 * soon as it is added, unless it is one of ours (`own`). Loaded by the shim
 * (cli.ts) before anything else: small, no imports.
 */

/** Marks a listener of ours; `Symbol.for`, as the CLI's two bundle files each may hold a copy of this module. */
const OWN = Symbol.for('graceful-cluster.own-signal-listener');

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a listener typed for its event, as process.on() takes one
type Listener = (...args: any[]) => void;

export function own<T extends Listener>(listener: T): T {
	(listener as unknown as Record<symbol, boolean>)[OWN] = true;
	return listener;
}

const listenersOf = (event: string): Listener[] => process.listeners(event as NodeJS.Signals) as Listener[];

const isOwn = (listener: Listener): boolean => (listener as unknown as Record<symbol, boolean | undefined>)[OWN] === true;

/** `put back`: one of ours that another module took off (`process.removeAllListeners('SIGTERM')`). */
export interface SetAside {
	readonly signal: NodeJS.Signals;
	readonly listener: string;
	readonly action: 'set aside' | 'put back';
}

export class SignalGuard {
	/** Set aside before anyone asked to hear of it (the logger comes later). */
	private readonly pending: SetAside[] = [];
	private report: ((setAside: SetAside) => void) | undefined;
	private releasing = false;

	/** Takes off the listeners on `signals` already there (every one a preload's), and every later one not marked `own`. */
	constructor(signals: readonly NodeJS.Signals[]) {
		const watched = new Set<string | symbol>(signals);
		for (const signal of signals) {
			for (const listener of process.listeners(signal)) {
				this.setAside(signal, listener as Listener);
			}
		}

		// Node's own listeners on these two events turn a listener on a signal
		// into the process's handler of it, and back. A bare
		// `process.removeAllListeners()` takes them off too: ours, put back
		// alone, would handle nothing.
		const wiring = (['newListener', 'removeListener'] as const).map(event => [event, listenersOf(event).filter(listener => /^(?:start|stop)ListeningIfSignal$/.test(listener.name))] as const);
		// 'newListener' comes before the listener is added: it is taken off a
		// microtask later, before any signal can be delivered (signals come from
		// the event loop).
		const onNew = (event: string | symbol, listener: Listener): void => {
			if (watched.has(event) && !isOwn(listener)) {
				queueMicrotask(() => {
					this.setAside(event as NodeJS.Signals, listener);
				});
			}
		};

		// Without ours, the signal's default action ends the primary at once, the
		// workers with it. Ours are all `on`, never `once`: only release() takes one off.
		const onRemove = (event: string | symbol, listener: Listener): void => {
			if (watched.has(event) && isOwn(listener) && !this.releasing) {
				queueMicrotask(() => {
					for (const [name, listeners] of [...wiring, ['newListener', [onNew]], ['removeListener', [onRemove]]] as const) {
						for (const each of listeners) {
							if (!listenersOf(name).includes(each)) {
								process.on(name as NodeJS.Signals, each);
							}
						}
					}

					if (!process.listeners(event as NodeJS.Signals).includes(listener)) {
						process.on(event as NodeJS.Signals, listener);
						this.tell({signal: event as NodeJS.Signals, listener: listener.name || 'an anonymous function', action: 'put back'});
					}
				});
			}
		};

		process.on('newListener', onNew);
		process.on('removeListener', onRemove);
	}

	release(signal: NodeJS.Signals, listener: Listener): void {
		this.releasing = true;
		try {
			process.removeListener(signal, listener);
		} finally {
			this.releasing = false;
		}
	}

	reportTo(report: (setAside: SetAside) => void): void {
		this.report = report;
		for (const setAside of this.pending.splice(0)) {
			report(setAside);
		}
	}

	private setAside(signal: NodeJS.Signals, listener: Listener): void {
		// removeListener finds a `once` wrapper by the function it wraps.
		process.removeListener(signal, listener);
		this.tell({signal, listener: listener.name || 'an anonymous function', action: 'set aside'});
	}

	private tell(setAside: SetAside): void {
		if (this.report) {
			this.report(setAside);
		} else {
			this.pending.push(setAside);
		}
	}
}
