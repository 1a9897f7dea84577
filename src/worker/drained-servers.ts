/** A process's drained servers, one filter each, and the requests they handed to the app since the process started, those of servers let go of included. */
import type {Clock} from '../clock.js';
import {sumFilterCounts, type FilterCounts} from '../counts.js';
import type {WorkerSettings} from '../settings.js';
import {LISTEN_SETTLE_MS} from '../timeline.js';
import {createFilter, type FilterWiring} from './create-filter.js';
import {addressOf, type DrainableServer, type Mode, type ServerFilter} from './filter.js';

export interface DrainedServersWiring extends FilterWiring {
	readonly covers: (address: string) => void;
	/** A drained server listened, for the first time since it was taken. */
	readonly listened: () => void;
}

export class DrainedServers {
	readonly filters: ServerFilter[] = [];
	private detachedRequests = 0;
	private detachedAged = 0;
	private detachedShed = 0;

	constructor(private readonly settings: WorkerSettings, private readonly wiring: DrainedServersWiring) {}

	get counts(): FilterCounts {
		return sumFilterCounts(this.filters);
	}

	/** The heartbeat's count (`--max-requests`). */
	get requests(): number {
		let total = this.detachedRequests;
		for (const filter of this.filters) {
			total += filter.requests;
		}

		return total;
	}

	/** Connections closed for their age, by every filter this process had. */
	get connectionsAged(): number {
		let total = this.detachedAged;
		for (const filter of this.filters) {
			total += filter.connectionsAged;
		}

		return total;
	}

	/** Requests shed (`--max-event-loop-delay`) since the process started. */
	get shed(): number {
		let total = this.detachedShed;
		for (const filter of this.filters) {
			total += filter.shed;
		}

		return total;
	}

	add(server: DrainableServer): ServerFilter {
		const filter = createFilter(server, this.settings, this.wiring);
		this.filters.push(filter);
		const covers = (): void => {
			const address = server.address();
			// Not once the app let go of it (`exclude`): it listens uncounted.
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

	enter(mode: Mode, stop: 'no' | 'keep-idle' | 'close-idle'): void {
		for (const filter of this.filters) {
			filter.setMode(mode);
			if (stop !== 'no') {
				filter.stopAccepting(stop === 'keep-idle');
			}

			filter.sortLongLived();
		}
	}

	sortLongLived(): void {
		for (const filter of this.filters) {
			filter.sortLongLived();
		}
	}

	closeConnections(): void {
		for (const filter of this.filters) {
			filter.closeConnections();
		}
	}

	get closing(): boolean {
		return this.filters.some(filter => filter.closingConnections > 0);
	}

	remove(filter: ServerFilter): void {
		filter.uninstall();
		const index = this.filters.indexOf(filter);
		if (index !== -1) {
			this.filters.splice(index, 1);
			this.detachedRequests += filter.requests;
			this.detachedAged += filter.connectionsAged;
			this.detachedShed += filter.shed;
		}
	}
}

/**
 * A drain that came while the app was still starting: its hooks wait for the first
 * drained server's listen and LISTEN_SETTLE_MS more, for the app's other servers and
 * the shutdown code its listen callbacks register; at most `wait`'s time.
 */
export class StartWait {
	private until = 0;
	private anyListened = false;

	constructor(private readonly clock: Clock, private readonly later: (run: () => void, ms: number) => void, private readonly recheck: () => void) {}

	get over(): boolean {
		return this.clock.now() >= this.until;
	}

	wait(ms: number): void {
		this.until = this.clock.now() + ms;
		this.later(this.recheck, ms);
	}

	listened(): void {
		if (this.until > 0 && !this.anyListened && !this.over) {
			this.wait(LISTEN_SETTLE_MS);
		}

		this.anyListened = true;
	}
}
