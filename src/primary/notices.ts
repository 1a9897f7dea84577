/**
 * What a worker asks the primary to tell the operator (protocol.ts
 * `NoticeMessage`): once for the cluster, whichever worker saw it first.
 */
import type {Logger} from '../logger.js';
import type {NoticeCode} from '../protocol.js';
import type {WorkerRecord} from './worker-record.js';

export class Notices {
	private readonly told = new Set<NoticeCode>();

	constructor(private readonly workers: number, private readonly logger: Logger) {}

	tell(record: WorkerRecord, code: NoticeCode): void {
		if (this.told.has(code)) {
			return;
		}

		this.told.add(code);
		switch (code) {
			case 'socket.io-polling': {
				if (this.workers > 1) {
					this.logger.warn({worker: record.id, workers: this.workers}, 'socket.io long-polling under several workers: a client\'s polls land on other workers, which do not know its session. Set transports: [\'websocket\'] on the server and the client, or run one worker per process behind sticky sessions');
				}

				break;
			}

			default: {
				const never: never = code;
				throw new Error(`unknown notice ${String(never)}`);
			}
		}
	}
}
