/**
 * The app's own listeners for the signals graceful-cluster gives a meaning, held:
 * they run once, after the requests in flight, not at the signal. A hand-written
 * `process.on('SIGTERM', () => server.close(...))` (or close-with-grace, lightship,
 * terminus, NestJS's `enableShutdownHooks()`) fights the drain: on a group signal
 * (Ctrl-C, systemd's `KillMode=control-group`) every worker would close at once,
 * refusing the reject phase's requests; when only the primary is signalled
 * (Kubernetes, Docker) it would never run.
 *
 * The bootstrap and the app's copy of `attach()` may be two installs of this
 * package: they meet on a global under a versioned `Symbol.for` key, and only plain
 * data and functions cross it.
 */
import os from 'node:os';

export interface HeldListener {
	readonly signal: NodeJS.Signals;
	readonly listener: (...args: unknown[]) => unknown;
}

export interface SignalListeners {
	readonly v: 1;
	readonly held: HeldListener[];
	received: NodeJS.Signals | undefined;
	/** The bootstrap calls them (a worker whose app never attached) until `attach()` claims them. */
	owner: 'bootstrap' | 'attach';
	/** One of graceful-cluster's own listeners, which the app's `removeAllListeners()` leaves in place. */
	// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a listener typed for its event, as process.on() takes one
	listenOurselves(event: string, listener: (...args: any[]) => void): void;
	readonly ran: Set<HeldListener>;
	/**
	 * Set while the app's own shutdown runs: a held signal the app sends itself (terminus
	 * and NestJS re-raise theirs when done, expecting to die of it) comes here instead.
	 * Optional: a holder made by another installed copy may lack it.
	 */
	onSelfSignal?: ((signal: NodeJS.Signals) => void) | undefined;
	/** Set by the bootstrap when a leave found no listener to run (the app still loading): one registered later must still hear of it. */
	onHeld?: ((entry: HeldListener) => void) | undefined;
}

/**
 * Plain Node ends the process on a self-sent signal only when no listener is left for
 * it: signal-exit re-raises only when it thinks it is alone, and terminus and NestJS
 * take theirs off first.
 */
export const endsProcess = (holder: SignalListeners, signal: NodeJS.Signals): boolean => !holder.held.some(entry => entry.signal === signal);

/** The stop signals, in the order a leave falls back on their listeners (`listenersFor`). */
export const STOP_SIGNALS: readonly NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGQUIT'];

const KEY = Symbol.for('graceful-cluster.signal-listeners.v1');

export function getSignalListeners(): SignalListeners | undefined {
	return (globalThis as Record<symbol, SignalListeners | undefined>)[KEY];
}

type Listener = (...args: unknown[]) => void;

/** `process.kill()` takes a name or a number; none is SIGTERM. */
function signalName(signal: string | number | undefined): string | undefined {
	if (signal === undefined) {
		return 'SIGTERM';
	}

	if (typeof signal === 'string') {
		return signal;
	}

	return Object.entries(os.constants.signals).find(([, number]) => number === signal)?.[0];
}

/**
 * From now on the app's listeners for `signals` are kept here, not on `process`, and
 * those already there move here too (a `--require` preload's, such as an APM agent's).
 * With `ownExisting`, every other listener already there is ours (node:cluster's IPC
 * listeners), out of reach of the app's `removeAllListeners()`.
 */
export function holdSignalListeners({ownExisting, signals}: {ownExisting: boolean; signals: readonly NodeJS.Signals[]}): SignalListeners {
	const existing = getSignalListeners();
	if (existing) {
		return existing;
	}

	const held = new Set<string | symbol>(signals);
	type Method = (event: string | symbol, listener: Listener) => NodeJS.Process;
	const bind = (method: unknown): Method => (method as Method).bind(process);
	const original = {
		on: bind(process.on),
		once: bind(process.once),
		prependListener: bind(process.prependListener),
		prependOnceListener: bind(process.prependOnceListener),
		removeListener: bind(process.removeListener),
		listeners: process.listeners.bind(process) as (event: string | symbol) => Listener[],
		rawListeners: process.rawListeners.bind(process) as (event: string | symbol) => Listener[],
		listenerCount: process.listenerCount.bind(process) as (event: string | symbol) => number,
		kill: process.kill.bind(process),
	};
	const listeners: HeldListener[] = [];
	const ours = new Map<string | symbol, Set<unknown>>();
	const keep = (event: string | symbol, listener: unknown): void => {
		let set = ours.get(event);
		if (!set) {
			set = new Set();
			ours.set(event, set);
		}

		set.add(listener);
	};

	if (ownExisting) {
		for (const event of process.eventNames()) {
			if (!held.has(event)) {
				for (const listener of process.rawListeners(event)) {
					keep(event, listener);
				}
			}
		}
	}

	const holder: SignalListeners = {
		v: 1,
		held: listeners,
		received: undefined,
		owner: 'bootstrap',
		ran: new Set(),
		onSelfSignal: undefined,
		onHeld: undefined,
		listenOurselves(event, listener) {
			keep(event, listener);
			original.on(event, listener as Listener);
		},
	};

	for (const signal of signals) {
		// rawListeners: a `once` listener stays wrapped, so calling it keeps its once-ness.
		for (const listener of process.rawListeners(signal) as Listener[]) {
			original.removeListener(signal, listener);
			listeners.push({signal, listener});
		}
	}

	const hold = (first: boolean) => (event: string | symbol, listener: Listener): NodeJS.Process => {
		const entry = {signal: event as NodeJS.Signals, listener};
		if (first) {
			listeners.unshift(entry);
		} else {
			listeners.push(entry);
		}

		holder.onHeld?.(entry);
		return process;
	};

	const of = (event: string | symbol): HeldListener[] => listeners.filter(entry => entry.signal === event);
	const unwrap = (listener: Listener): Listener => (listener as Listener & {listener?: Listener}).listener ?? listener;
	const patch = {
		// A library that asks "am I the only listener?" (signal-exit) must get the app's
		// answer, not graceful-cluster's own handler.
		listeners: (event: string | symbol) => held.has(event) ? of(event).map(entry => unwrap(entry.listener as Listener)) : original.listeners(event),
		rawListeners: (event: string | symbol) => held.has(event) ? of(event).map(entry => entry.listener) : original.rawListeners(event),
		listenerCount: (event: string | symbol) => held.has(event) ? of(event).length : original.listenerCount(event),
		on: (event: string | symbol, listener: Listener) => held.has(event) ? hold(false)(event, listener) : original.on(event, listener),
		once: (event: string | symbol, listener: Listener) => held.has(event) ? hold(false)(event, listener) : original.once(event, listener),
		prependListener: (event: string | symbol, listener: Listener) => held.has(event) ? hold(true)(event, listener) : original.prependListener(event, listener),
		prependOnceListener: (event: string | symbol, listener: Listener) => held.has(event) ? hold(true)(event, listener) : original.prependOnceListener(event, listener),
		removeListener(event: string | symbol, listener: Listener) {
			if (held.has(event)) {
				// Like EventEmitter: the most recently added match goes.
				for (let index = listeners.length - 1; index >= 0; index--) {
					if (listeners[index]!.signal === event && listeners[index]!.listener === listener) {
						listeners.splice(index, 1);
						return process;
					}
				}
			}

			return original.removeListener(event, listener);
		},
		removeAllListeners(event?: string | symbol) {
			// Ours stay: without them a worker would die of the next group signal, or never
			// hear the drain. `process.eventNames()` does not know the held ones.
			const names = event === undefined ? new Set([...process.eventNames(), ...held]) : [event];
			for (const name of names) {
				if (held.has(name)) {
					for (let index = listeners.length - 1; index >= 0; index--) {
						if (listeners[index]!.signal === name) {
							listeners.splice(index, 1);
						}
					}
				}

				for (const listener of original.rawListeners(name)) {
					if (!ours.get(name)?.has(listener)) {
						original.removeListener(name, listener as Listener);
					}
				}
			}

			return process;
		},
		kill(pid: number, signal?: string | number): true {
			const name = signalName(signal);
			if (holder.onSelfSignal && Number(pid) === process.pid && name !== undefined && held.has(name)) {
				holder.onSelfSignal(name as NodeJS.Signals);
				return true;
			}

			return original.kill(pid, signal);
		},
	};
	Object.assign(process, {...patch, addListener: patch.on, off: patch.removeListener});
	(globalThis as Record<symbol, SignalListeners>)[KEY] = holder;
	return holder;
}

/**
 * The listeners a leave calls for `received`; if the app has none for it, those of
 * the first stop signal it listens for (a Ctrl-C handler when Kubernetes sent
 * SIGTERM). `retiring` adds the first stop signal's after the received one's (a
 * SIGHUP listener may only re-read config). Each function once: an app often
 * registers one shutdown function for several signals (a pool ended twice throws).
 */
export function listenersFor(holder: SignalListeners, received: NodeJS.Signals, {retiring = false}: {retiring?: boolean} = {}): HeldListener[] {
	const of = (signal: NodeJS.Signals): HeldListener[] => holder.held.filter(entry => entry.signal === signal);
	const stop = STOP_SIGNALS.map(of).find(entries => entries.length > 0) ?? [];
	const own = of(received);
	const chosen = own.length === 0 ? stop : (retiring ? [...own, ...stop] : own);
	const seen = new Set<HeldListener['listener']>([...holder.ran].map(entry => entry.listener));
	return chosen.filter(entry => {
		const first = !seen.has(entry.listener);
		seen.add(entry.listener);
		return first;
	});
}

/** Registered for a stop signal: shutdown code, whatever signal it is called for now. */
export const isStopListener = (holder: SignalListeners, entry: HeldListener): boolean => holder.held.some(other => other.listener === entry.listener && STOP_SIGNALS.includes(other.signal));

export const listenerName = (entry: HeldListener, received: NodeJS.Signals): string => `${received} listener${entry.listener.name ? ` ${entry.listener.name}` : ''}`;

/**
 * Calls `entries` as Node's `process.emit(received)` would: in order, without waiting
 * for one to finish. A listener that throws does not stop the others (Node would
 * crash the process); `onError` hears of it, and of a rejected promise.
 */
export function callListeners(holder: SignalListeners, entries: readonly HeldListener[], received: NodeJS.Signals, onError: (name: string, error: unknown) => void): string[] {
	const names = entries.map(entry => listenerName(entry, received));
	for (const [index, entry] of entries.entries()) {
		if (holder.ran.has(entry)) {
			continue;
		}

		holder.ran.add(entry);
		const name = names[index]!;
		try {
			const result = entry.listener.call(process, received);
			// Any thenable (Bluebird's too).
			if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') {
				Promise.resolve(result).catch((error: unknown) => {
					onError(name, error);
				});
			}
		} catch (error) {
			onError(name, error);
		}
	}

	return names;
}
