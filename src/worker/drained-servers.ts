/**
 * A process's drained servers, as its drain (drain.ts) holds them: one filter
 * each (create-filter.ts), their counts summed, and the requests they handed
 * to the app since the process started, those of servers let go of included.
 */
import type {Clock} from '../clock.js';
import {sumFilterCounts, type FilterCounts} from '../counts.js';
import type {WorkerSettings} from '../settings.js';
import {LISTEN_SETTLE_MS} from '../timeline.js';
import {createFilter, type FilterWiring} from './create-filter.js';
import {addressOf, type DrainableServer, type Mode, type ServerFilter} from './filter.js';

export interface DrainedServersWiring extends FilterWiring {
	/** A drained server listens on `address` (its port, or a socket's path). */
	readonly covers: (address: string) => void;
	/** A drained server listened, for the first time since it was taken. */
	readonly listened: () => void;
}

export class DrainedServers {
	/** The filters, in the order their servers were taken. */
	readonly filters: ServerFilter[] = [];
	/** Requests counted by filters since taken off. */
	private detachedRequests = 0;

	constructor(private readonly settings: WorkerSettings, private readonly wiring: DrainedServersWiring) {}

	/** Every filter's counts, summed. */
	get counts(): FilterCounts {
		return sumFilterCounts(this.filters);
	}

	/** Requests handed to the app since the process started, detached servers' included: the heartbeat's count (`--max-requests`). */
	get requests(): number {
		let total = this.detachedRequests;
		for (const filter of this.filters) {
			total += filter.requests;
		}

		return total;
	}

	add(server: DrainableServer): ServerFilter {
		const filter = createFilter(server, this.settings, this.wiring);
		this.filters.push(filter);
		const covers = (): void => {
			const address = server.address();
			// Not once the app let go of it (attach.ts `exclude`): it listens uncounted.
			if (address && this.filters.includes(filter)) {
				this.wiring.covers(addressOf(address));
			}
		};

		if (server.listening) {
			covers();
		}

		server.on('listening', covers);
		server.once('listening', this.wiring.listened);
		return filter;
	}

	/** Each filter answers in `mode`; `stop`: how they stop taking connections, if they do now. */
	enter(mode: Mode, stop: 'no' | 'keep-idle' | 'close-idle'): void {
		for (const filter of this.filters) {
			filter.setMode(mode);
			if (stop !== 'no') {
				filter.stopAccepting(stop === 'keep-idle');
			}

			filter.sortLongLived();
		}
	}

	/** Responses that turned out to be event streams move from in flight to `streams` (filter.ts `sortLongLived`). */
	sortLongLived(): void {
		for (const filter of this.filters) {
			filter.sortLongLived();
		}
	}

	/** Nothing is in flight: every connection left is closed gracefully. */
	closeConnections(): void {
		for (const filter of this.filters) {
			filter.closeConnections();
		}
	}

	/** True while a connection closed gracefully has not closed yet. */
	get closing(): boolean {
		return this.filters.some(filter => filter.closingConnections > 0);
	}

	/** Takes the filter off its server (`exclude()`); its requests still count in `requests`. */
	remove(filter: ServerFilter): void {
		filter.uninstall();
		const index = this.filters.indexOf(filter);
		if (index !== -1) {
			this.filters.splice(index, 1);
			this.detachedRequests += filter.requests;
		}
	}
}

/**
 * A drain that came while the app was still starting (nothing listened yet):
 * its hooks wait for the first drained server's listen and LISTEN_SETTLE_MS
 * more, for the app's other servers and the shutdown code its listen callbacks
 * register; or as long as `wait` was told if nothing listens by then.
 */
export class StartWait {
	/** `clock.now()` until which the hooks wait; 0: not waiting. */
	private until = 0;
	private anyListened = false;

	/** `later` runs `recheck` once a wait is over. */
	constructor(private readonly clock: Clock, private readonly later: (run: () => void, ms: number) => void, private readonly recheck: () => void) {}

	get over(): boolean {
		return this.clock.now() >= this.until;
	}

	wait(ms: number): void {
		this.until = this.clock.now() + ms;
		this.later(this.recheck, ms);
	}

	/** A drained server listened: the first listen of a process still waited for ends the wait LISTEN_SETTLE_MS from now. */
	listened(): void {
		if (this.until > 0 && !this.anyListened && !this.over) {
			this.wait(LISTEN_SETTLE_MS);
		}

		this.anyListened = true;
	}
}
