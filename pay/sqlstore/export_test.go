package sqlstore

// MoneyPathStatements returns, by name, every statement a payment, its
// status changes, its outbox, its webhook deliveries and its reconciliation
// run, as the store sends them to d's database.
func MoneyPathStatements(d Dialect) map[string]string {
	q, o, c := newQueries(d), newOpQueries(d), newConfirmQueries(d)
	return map[string]string{
		"insertOp": o.insertOp, "opByKey": o.opByKey, "getOp": o.getOp, "opsOfPayment": o.opsOfPayment,
		"holdingOp": o.holdingOp, "updateOp": o.updateOp, "setCaptured": o.setCaptured, "claimDueOps": o.claimDueOps,
		"deferOp": o.deferOp, "expiredAuths": o.expiredAuths, "merchantEvents": o.merchantEvents,
		"getPayment": q.getPayment, "lockPayment": q.lockPayment, "history": q.history,
		"lockWithHistory": q.lockWithHistory, "insertPayment": q.insertPayment, "updateStatus": q.updateStatus, "updateStatusFreeing": q.updateStatusFreeing,
		"flagReview": q.flagReview, "insertOutbox": q.insertOutbox,
		"getIdem": q.getIdem, "upsertIdem": q.upsertIdem,
		"pendingOutbox": q.pendingOutbox, "markPublished": markPublished(d, 3), "deleteExpired": q.deleteExpired,
		"liveOrder": q.liveOrder, "getMerchant": q.getMerchant, "merchantByKey": q.merchantByKey,
		"insertDelivery": q.insertDelivery, "dueDeliveries": q.dueDeliveries, "claimDelivery": q.claimDelivery,
		"recordAttempt": q.recordAttempt, "getDelivery": q.getDelivery, "claimDue": q.claimDue,
		"unconfirmed": c.unconfirmed, "confirm": c.insert, "confirmation": c.byPayment,
		"claimOne": q.claimOne, "deferInquiry": q.deferInquiry, "oldestUnpublished": q.oldestUnpublished,
	}
}
