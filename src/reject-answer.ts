/**
 * A drain's 503 as bytes, one wording whoever answers: a worker's filter on a
 * raw socket (an upgrade's), or the primary to a connection node:cluster
 * stranded (primary/stranded.ts).
 */

export const REJECT_BODY = Buffer.from('Service Unavailable: the server is shutting down, retry the request.\n');
/** The primary's 503 outside a drain: no worker could take the connection (it crashed, or stopped listening). */
/** `--max-event-loop-delay`'s answer: this worker is too busy now, not leaving. */
export const SHED_BODY = Buffer.from('Service Unavailable: the server is overloaded, retry the request later.\n');
export const NO_WORKER_BODY = Buffer.from('Service Unavailable: no worker could take this connection, retry the request.\n');

export function rawServiceUnavailable(retryAfterSeconds: number, body: Buffer): Buffer {
	return Buffer.concat([
		Buffer.from(`HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: ${retryAfterSeconds}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${body.length}\r\nCache-Control: no-store\r\n\r\n`, 'latin1'),
		body,
	]);
}
