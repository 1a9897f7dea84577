/**
 * The app's own `process.on('SIGTERM' | 'SIGINT')` listeners, held.
 *
 * The usual hand-written shutdown, `process.on('SIGTERM', () => server.close(() =>
 * process.exit(0)))`, fights the drain: on a group signal (Ctrl-C, systemd's
 * `KillMode=control-group`) every worker would close at once, refusing the
 * reject phase's requests; when only the primary is signalled (Kubernetes,
 * Docker) it would never run, and its cleanup would be skipped. So we take such
 * listeners as the app registers them and call each once, with the signal's
 * name, after the requests in flight are done: as the last shutdown hooks.
 *
 * Installed by the bootstrap in a cluster worker (before the app's first line)
 * and by `attach()` in standalone mode (which also moves the listeners the app
 * registered before it). The bootstrap and the app's copy of `attach()` may be
 * two installs of this package: they meet on a global under a versioned
 * `Symbol.for` key, and only plain data and functions cross it.
 */
import type {NamedHook} from './hooks.js';

export type HeldSignal = 'SIGTERM' | 'SIGINT';

export interface HeldListener {
	readonly signal: HeldSignal;
	readonly listener: (...args: unknown[]) => unknown;
}

export interface SignalListeners {
	readonly v: 1;
	/** The app's listeners, in the order it registered them. */
	readonly held: HeldListener[];
	/** The first stop signal this process received itself, if any. */
	received: NodeJS.Signals | undefined;
	/**
	 * Who calls them: the bootstrap (a worker whose app never attached: at the
	 * basic drain's disconnect) until `attach()` claims them (as its last hooks).
	 */
	owner: 'bootstrap' | 'attach';
	/**
	 * Adds one of graceful-cluster's own listeners, past the interception; the
	 * app's `removeAllListeners()` leaves it in place.
	 */
	listenOurselves(event: string, listener: (...args: any[]) => void): void;
	/** Calls each held listener once, in order; each only ever once. */
	readonly ran: Set<HeldListener>;
}

const KEY = Symbol.for('graceful-cluster.signal-listeners.v1');
const SIGNALS: ReadonlySet<string | symbol> = new Set<HeldSignal>(['SIGTERM', 'SIGINT']);

export function getSignalListeners(): SignalListeners | undefined {
	return (globalThis as Record<symbol, SignalListeners | undefined>)[KEY];
}

type Listener = (...args: unknown[]) => void;

/**
 * Starts holding: from now on the app's SIGTERM/SIGINT listeners are kept here,
 * not on `process`. With `takeExisting`, the ones already on `process` (the
 * app's, registered before `attach()` in standalone mode) move here too.
 * Idempotent: a second call returns the first one's holder.
 */
export function holdSignalListeners({takeExisting}: {takeExisting: boolean}): SignalListeners {
	const existing = getSignalListeners();
	if (existing) {
		return existing;
	}

	type Method = (event: string | symbol, listener: Listener) => NodeJS.Process;
	const bind = (method: unknown): Method => (method as Method).bind(process);
	const original = {
		on: bind(process.on),
		once: bind(process.once),
		prependListener: bind(process.prependListener),
		prependOnceListener: bind(process.prependOnceListener),
		removeListener: bind(process.removeListener),
	};
	const held: HeldListener[] = [];
	// Listeners the app must not take away with `removeAllListeners()`: ours (the
	// IPC channel, the handlers that keep a worker alive through a group signal)
	// and, in a worker, whatever node:cluster put there before the app ran.
	const ours = new Map<string | symbol, Set<unknown>>();
	const keep = (event: string | symbol, listener: unknown): void => {
		let set = ours.get(event);
		if (!set) {
			set = new Set();
			ours.set(event, set);
		}

		set.add(listener);
	};

	if (!takeExisting) {
		for (const event of process.eventNames()) {
			for (const listener of process.rawListeners(event)) {
				keep(event, listener);
			}
		}
	}

	const holder: SignalListeners = {
		v: 1,
		held,
		received: undefined,
		owner: 'bootstrap',
		ran: new Set(),
		listenOurselves(event, listener) {
			keep(event, listener);
			original.on(event, listener as Listener);
		},
	};

	if (takeExisting) {
		for (const signal of SIGNALS as ReadonlySet<HeldSignal>) {
			// rawListeners: a `once` listener stays wrapped, so calling it keeps its once-ness.
			for (const listener of process.rawListeners(signal) as Listener[]) {
				original.removeListener(signal, listener);
				held.push({signal, listener});
			}
		}
	}

	const hold = (first: boolean) => (event: string | symbol, listener: Listener): NodeJS.Process => {
		const entry = {signal: event as HeldSignal, listener};
		if (first) {
			held.unshift(entry);
		} else {
			held.push(entry);
		}

		return process;
	};

	const patch = {
		on: (event: string | symbol, listener: Listener) => SIGNALS.has(event) ? hold(false)(event, listener) : original.on(event, listener),
		// Each held listener is called once anyway: `once` holds it like `on`.
		once: (event: string | symbol, listener: Listener) => SIGNALS.has(event) ? hold(false)(event, listener) : original.once(event, listener),
		prependListener: (event: string | symbol, listener: Listener) => SIGNALS.has(event) ? hold(true)(event, listener) : original.prependListener(event, listener),
		prependOnceListener: (event: string | symbol, listener: Listener) => SIGNALS.has(event) ? hold(true)(event, listener) : original.prependOnceListener(event, listener),
		removeListener(event: string | symbol, listener: Listener) {
			if (SIGNALS.has(event)) {
				// Like EventEmitter: the most recently added match goes.
				for (let index = held.length - 1; index >= 0; index--) {
					if (held[index]!.signal === event && held[index]!.listener === listener) {
						held.splice(index, 1);
						return process;
					}
				}
			}

			return original.removeListener(event, listener);
		},
		removeAllListeners(event?: string | symbol) {
			// Like EventEmitter's, but ours stay: without them a worker would die
			// of the next group signal, or never hear the drain.
			for (const name of event === undefined ? process.eventNames() : [event]) {
				if (SIGNALS.has(name)) {
					for (let index = held.length - 1; index >= 0; index--) {
						if (held[index]!.signal === name) {
							held.splice(index, 1);
						}
					}
				}

				for (const listener of process.rawListeners(name)) {
					if (!ours.get(name)?.has(listener)) {
						original.removeListener(name, listener as Listener);
					}
				}
			}

			return process;
		},
	};
	Object.assign(process, {...patch, addListener: patch.on, off: patch.removeListener});
	(globalThis as Record<symbol, SignalListeners>)[KEY] = holder;
	return holder;
}

/**
 * The held listeners as hooks, each function called at most once with the
 * signal's name: an app often registers one shutdown function for both SIGTERM
 * and SIGINT, and it must not run twice (a pool ended twice throws).
 */
export function asHooks(holder: SignalListeners): NamedHook[] {
	const seen = new Set<HeldListener['listener']>();
	const unique = holder.held.filter(entry => {
		const first = !seen.has(entry.listener);
		seen.add(entry.listener);
		return first;
	});
	return unique.map(entry => ({
		name: `${entry.signal} listener${entry.listener.name ? ` ${entry.listener.name}` : ''}`,
		run() {
			if (holder.ran.has(entry)) {
				return undefined;
			}

			holder.ran.add(entry);
			// The signal the process got; a worker signalled only through the
			// primary (Kubernetes, Docker) was asked to stop all the same.
			return entry.listener.call(process, holder.received ?? 'SIGTERM');
		},
	}));
}
