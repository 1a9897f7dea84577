/**
 * What differs between running under the primary and running alone, as one
 * process's drain (drain.ts) tells it: cluster-host.ts (reports to the
 * primary, exit once it knows) and standalone.ts (its own log and exit).
 */
import type {Counts} from '../counts.js';
import type {DrainSummary, NoticeCode} from '../protocol.js';

export interface DrainHost {
	/**
	 * Called about four times a second during a drain with the current counts
	 * (when one changed): requests in flight, and long-lived connections apart.
	 */
	progress(counts: Counts): void;
	/**
	 * Every request is done and there are hooks to run: they start when the host
	 * calls `proceed`. Under the primary, once the primary has read so, so that a
	 * hook's `process.exit()` cannot leave it thinking requests were lost.
	 */
	hooksStarting(counts: Counts, proceed: () => void): void;
	/**
	 * A hook or one of the app's own listeners failed: resolves once the host
	 * has passed it on (the primary must know before a later hook may exit).
	 */
	hookFailed?(name: string): Promise<void>;
	/**
	 * The drain is over and the hooks ran: exit. `exit` is `'own'` when the
	 * app's own shutdown ended with nothing of its left running: the process
	 * ends by itself once it is idle (whatever the app's `'beforeExit'`
	 * listeners still started finishes first).
	 */
	finish(summary: DrainSummary, exit: 'now' | 'own'): void;
	/** An attached server listens on `address` (its port, or a socket's path). */
	covers?(address: string): void;
	/** Something for the primary to tell the operator once (protocol.ts `NoticeMessage`). */
	notice?(code: NoticeCode): void;
	/** A drain's signal reached this retiring worker (`drainWhileRetiring`): `counts` are its counts then. */
	signalledWhileRetiring?(counts: Counts): void;
	/** The drained servers stopped taking connections (the reject phase's end, a retire): the process's others stop too. */
	stoppedAccepting?: (() => void) | undefined;
}
