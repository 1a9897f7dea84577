/** What differs between running under the primary (cluster-host.ts) and alone (standalone.ts), as one process's drain tells it. */
import type {Counts} from '../counts.js';
import type {DrainSummary, NoticeCode} from '../protocol.js';

export interface DrainHost {
	/** About four times a second during a drain, when a count changed. */
	progress(counts: Counts): void;
	/** Hooks start when the host calls `proceed`: under the primary, once it has read so, so a hook's `process.exit()` cannot leave it thinking requests were lost. */
	hooksStarting(counts: Counts, proceed: () => void): void;
	/** Resolves once passed on: the primary must know before a later hook may exit. */
	hookFailed?(name: string): Promise<void>;
	/** `'own'`: the app's shutdown left nothing running, and the process ends by itself once idle. */
	finish(summary: DrainSummary, exit: 'now' | 'own'): void;
	covers?(address: string): void;
	notice?(code: NoticeCode): void;
	signalledWhileRetiring?(counts: Counts): void;
	/** The drained servers stopped taking connections: the process's others stop too. */
	stoppedAccepting?: (() => void) | undefined;
}
