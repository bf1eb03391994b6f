/**
 * The one reading of `Authorization: Bearer <token>` (RFC 6750 §2.1), for API keys, the admin
 * token and the metrics token alike. The scheme name is case-insensitive (RFC 9110 §11.1).
 */

const bearerHeader = /^bearer +(\S+)$/i

/** The token of a Bearer Authorization header; null when the header is absent or not of that form. */
export const bearerToken = (header: string | null | undefined): string | null => {
  if (header === null || header === undefined) return null
  const match = bearerHeader.exec(header)
  return match === null ? null : match[1]
}
