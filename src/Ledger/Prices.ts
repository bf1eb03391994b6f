/**
 * What each metered operation costs, in credits: the one place the prices are set. The handlers,
 * the prediction jobs and the endpoint descriptions in the contract all read them from here.
 */

/** A page of search or list results: reserved before the query runs, then settled by the rows shown. */
export const pagePrice = {
  reserve: 2,
  rowsPerCredit: 25
} as const

/** A single hook, taken at once when it is found. */
export const hookPrice = 1

/** A prediction, reserved when its clip lands and settled when it succeeds (refunded if it fails). */
export const predictionPrice = 20

/** Credits a page of `rows` rows costs: one per started `rowsPerCredit` rows, 0 for an empty page. */
export const pageCost = (rows: number): number => Math.ceil(rows / pagePrice.rowsPerCredit)

/** How a page's price reads in an endpoint description. */
export const pagePriceText =
  `Reserves ${pagePrice.reserve} credits and settles ceil(rows / ${pagePrice.rowsPerCredit}); an empty page costs 0.`
