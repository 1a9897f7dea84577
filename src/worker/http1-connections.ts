/**
 * How an HTTP/1.1 connection ends during a drain (http2-sessions.ts is the
 * HTTP/2 side): its last response carries `Connection: close`, so Node ends the
 * connection after it (RFC 9112 section 9.6) and the client opens its next
 * request elsewhere. Only the last: Node ends the connection after the first
 * response that carries it and drops the responses queued behind it, though
 * the app has computed them (pipelining).
 *
 * What a connection holds is marked on its socket, on rare paths only (a
 * pipelined request, a request during the drain): nothing per request while
 * serving.
 */
import type {IncomingMessage, ServerResponse} from 'node:http';
import type {Socket} from 'node:net';

/**
 * On a connection: the last app response that arrived while an earlier one
 * still held the connection (pipelining). Set on the pipelined path only, so the
 * drain can tell which response is a connection's last without a per-request
 * sequence number.
 */
const LAST_QUEUED = Symbol('graceful-cluster.lastQueued');
/**
 * On a connection, during a drain: a response on it carries `Connection: close`,
 * so Node ends the connection after it; a request that arrives behind it is
 * never processed.
 */
const CLOSING = Symbol('graceful-cluster.closing');
type TrackedSocket = Socket & {[LAST_QUEUED]?: ServerResponse | undefined; [CLOSING]?: true};

/**
 * At the drain's start: `Connection: close` on `response` if it is the last
 * its connection holds (`isOpen`: still in flight). If the last one's headers
 * are already sent, the close goes on whatever arrives next on the
 * connection, or the connection is closed with the idle ones when the drain
 * stops listening (retiring: when the linger ends).
 */
export function closeAfterLast(response: ServerResponse, isOpen: (response: ServerResponse) => boolean): void {
	const socket = response.req.socket as TrackedSocket | null;
	if (socket !== null) {
		// Responses on a connection finish in arrival order, so while the last
		// queued one is open it is the last; once it has closed, only the
		// response that arrived after it (holding the connection) can be open.
		const last = socket[LAST_QUEUED];
		if (last !== undefined && last !== response && isOpen(last)) {
			return;
		}

		if (!response.headersSent) {
			socket[CLOSING] = true;
		}
	}

	if (!response.headersSent) {
		response.setHeader('Connection', 'close');
	}
}

/**
 * A pipelined request whose response waits behind another has no socket yet,
 * and if the connection closes first (the client left, or the response ahead
 * carried `Connection: close`), Node never emits 'close' on it: `onClose` is
 * called with the response as `this` when its connection closes. Rare, so a
 * closure here is fine.
 */
export function watchQueued(request: IncomingMessage, response: ServerResponse, onClose: (this: ServerResponse) => void): void {
	const socket = request.socket as TrackedSocket;
	socket[LAST_QUEUED] = response;
	const onSocketClose = (): void => {
		onClose.call(response);
	};

	socket.once('close', onSocketClose);
	response.once('close', () => {
		socket.removeListener('close', onSocketClose);
		if (socket[LAST_QUEUED] === response) {
			socket[LAST_QUEUED] = undefined;
		}
	});
}

/**
 * During a drain, every response the filter lets through is its connection's
 * last (it carries `Connection: close`). True when this request may have that
 * last response; false when the connection already has it: Node will end the
 * connection before this request's turn, so it must not be processed nor
 * answered (the client sees the connection close and may retry it). Its body
 * is read so that the close is a FIN, not a reset.
 */
export function claimLast(request: IncomingMessage): boolean {
	const socket = request.socket as TrackedSocket | null;
	if (socket === null) {
		return true;
	}

	if (socket[CLOSING] === true) {
		request.resume();
		return false;
	}

	socket[CLOSING] = true;
	return true;
}

/**
 * Runs `close` (an `http.Server#close()`, which closes the connections Node
 * thinks idle) without cutting a response still on its way to the client. To
 * Node a connection is idle once its response has ended (`res.end()` called),
 * even while the body still waits to be written to a slow client: a 50 MB
 * `res.end(buffer)` to a client reading at 5 MB/s was cut after 13.6 MB at the
 * end of the reject phase. Node skips a connection whose response is not
 * finished, so those responses (the ledger's `open` at drain time, never per
 * request) are shown as unfinished for the length of the call.
 */
export function closeKeepingUnflushed(open: readonly ServerResponse[], close: () => void): void {
	type Finishable = ServerResponse & {finished: boolean};
	const unflushed = (open as readonly Finishable[]).filter(response => response.finished && !response.writableFinished);
	for (const response of unflushed) {
		response.finished = false;
	}

	try {
		close();
	} finally {
		for (const response of unflushed) {
			response.finished = true;
		}
	}
}
