"""Forms of the users page: a new user, and a user's e-mail and name.

The rules are the REST API's (`trainhub.tenancy.accounts`, the same the `POST /api/v1/users/`
serializer applies: username characters, the password validators against the name and
e-mail), so a refusal reads the same in both; the services write.
"""

from __future__ import annotations

from typing import Any

from django import forms

from trainhub.tenancy.accounts import password_problems, username_problem


class NewUserForm(forms.Form):
    username = forms.CharField(label="Username", max_length=150)
    email = forms.EmailField(
        label="E-mail",
        required=False,
        max_length=254,
        help_text="Team admins can add them to a team by it.",
    )
    first_name = forms.CharField(label="First name", max_length=150, required=False)
    last_name = forms.CharField(label="Last name", max_length=150, required=False)
    password = forms.CharField(
        label="Password",
        max_length=128,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="At least 12 characters, not a common one; give it to them privately. "
        "They can sign in with it at once.",
    )
    is_platform_admin = forms.BooleanField(
        label="Platform admin",
        required=False,
        help_text="Sees and changes everything, the admin site included.",
    )

    def clean_username(self) -> str:
        username: str = self.cleaned_data["username"].strip()
        if problem := username_problem(username):
            raise forms.ValidationError(problem)
        return username

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "password" in data and "username" in data:
            for problem in password_problems(
                data["password"],
                username=data["username"],
                email=data.get("email", ""),
                first_name=data.get("first_name", ""),
                last_name=data.get("last_name", ""),
            ):
                self.add_error("password", problem)
        return data


class EditUserForm(forms.Form):
    email = forms.EmailField(label="E-mail", required=False, max_length=254)
    first_name = forms.CharField(label="First name", max_length=150, required=False)
    last_name = forms.CharField(label="Last name", max_length=150, required=False)
