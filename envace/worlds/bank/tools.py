"""Bank tools. `deposit` and `transfer` echo the amount moved rather than the new balance, so a
response never needs a sum."""

from __future__ import annotations

from typing import Any

from envace.worlds.bank.db import Account, BankDB
from envace.worlds.base import ToolError, Toolkit, read_tool, write_tool


class BankTools(Toolkit):
    db: BankDB

    def _account(self, account: str) -> Account:
        acc = self.db.accounts.get(account)
        if acc is None:
            raise ToolError(f"unknown account {account!r}; accounts are {sorted(self.db.accounts)}")
        return acc

    @staticmethod
    def _amount(amount: int) -> None:
        if amount < 1:
            raise ToolError(f"amount must be at least 1, got {amount}")

    @read_tool
    def get_balance(self, account: str) -> dict[str, Any]:
        """Get the balance and status of an account.

        Args:
            account: account id
        """
        acc = self._account(account)
        return {"account": account, "balance": acc.balance, "status": acc.status}

    @read_tool
    def find_account(self, owner: str) -> dict[str, Any]:
        """Find the account of an owner.

        Args:
            owner: owner name
        """
        aid = self.db.account_of(owner)
        if aid is None:
            raise ToolError(f"{owner!r} has no account")
        return {"owner": owner, "account": aid}

    @write_tool
    def deposit(self, account: str, amount: int) -> dict[str, Any]:
        """Deposit money into an account.

        Args:
            account: account id
            amount: amount
        """
        acc = self._account(account)
        self._amount(amount)
        acc.balance += amount
        return {"ok": True, "account": account, "deposited": amount}

    @write_tool
    def transfer(self, src: str, dst: str, amount: int) -> dict[str, Any]:
        """Move money from one account to another.

        Args:
            src: source account id
            dst: target account id
            amount: amount
        """
        a, b = self._account(src), self._account(dst)
        self._amount(amount)
        if src == dst:
            raise ToolError("src and dst must be different accounts")
        if a.status == "frozen":
            raise ToolError(f"account {src} is frozen")
        if a.balance < amount:
            raise ToolError(f"account {src} has too little money")
        a.balance -= amount
        b.balance += amount
        return {"ok": True, "src": src, "dst": dst, "amount": amount}
